// Refreshes the panel in place every few seconds: the server renders it
// (numbers, SVG charts, tables) and this only swaps it in, keeping the
// page's scroll position and form. No dependencies.
"use strict";
(function () {
  const every = Number(document.body.dataset.refreshMs) || 5000;
  const panel = document.getElementById("panel");
  const updated = document.getElementById("updated");
  async function refresh() {
    try {
      const res = await fetch("/panel" + window.location.search, { cache: "no-store" });
      if (!res.ok) {
        return; // a bad URL or a database hiccup: keep the last panel
      }
      panel.innerHTML = await res.text();
      const now = res.headers.get("X-Dashboard-Time");
      if (now) {
        updated.dateTime = now;
        updated.textContent = now.slice(11, 19);
      }
    } catch (e) {
      // The dashboard restarts or the network drops: try again next time.
    } finally {
      window.setTimeout(refresh, every);
    }
  }
  window.setTimeout(refresh, every);
})();
