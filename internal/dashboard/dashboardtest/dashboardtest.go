// Package dashboardtest loads floodgate's dashboard in a real headless
// Chromium (Debian's, driven through chromedp) and reads what it shows:
// the tests check it, and the demo (examples/demo) uses it to check its
// dashboard and to take the README's screenshot. Neither the dashboard nor
// the floodgate binary imports it.
//
//	b, err := dashboardtest.Start(ctx, "/usr/bin/chromium", t.TempDir())
//	defer b.Close()
//	err = b.Token(ctx, token)                               // a dashboard with --auth-token-file
//	p, err := b.Load(ctx, "http://127.0.0.1:8090/")      // p.Total, p.Curves, p.TopDay, p.Decisions
//	err = b.WaitTotal(ctx, 42)                             // after the page refreshed itself
//	png, err := b.Screenshot(ctx)
//	errs := b.ConsoleErrors()                              // errors and exceptions the page logged
package dashboardtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// Browser is one headless Chromium with one tab.
type Browser struct {
	ctx    context.Context
	cancel func()

	mu      sync.Mutex
	console []string
}

// Start launches bin headless with a fresh profile in userDataDir. The flags
// keep it off the network but for the pages it is sent to (a closed
// network refuses its background connections) and let it run as root.
func Start(ctx context.Context, bin, userDataDir string) (*Browser, error) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(userDataDir),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.WindowSize(1360, 1000),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	b := &Browser{ctx: bctx, cancel: func() { bcancel(); acancel() }}
	// Subscribing starts the browser; the first Run must not carry a
	// timeout, which would end the browser with it.
	messages := chromedp.Console(bctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.console = append(b.console, m.String())
				b.mu.Unlock()
			}
		}
	}()
	if err := chromedp.Do(bctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("start chromium %s: %w", bin, err)
	}
	return b, nil
}

// Token makes every request of the tab carry "Authorization: Bearer
// token", for a dashboard that requires one (--auth-token-file).
func (b *Browser) Token(ctx context.Context, token string) error {
	ctx, cancel := b.bound(ctx, 10*time.Second)
	defer cancel()
	err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Authorization": "Bearer " + token}})
		return err
	}))
	if err != nil {
		return fmt.Errorf("set the dashboard token: %w", err)
	}
	return nil
}

// Close ends the browser.
func (b *Browser) Close() { b.cancel() }

// ConsoleErrors returns the errors and uncaught exceptions the pages logged
// (failed loads included), in order.
func (b *Browser) ConsoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.console...)
}

// Row is one top subject as shown.
type Row struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Value   int64  `json:"value"`
}

// Page is what the dashboard shows, read from the DOM's data attributes.
type Page struct {
	Action    string            `json:"action"`
	Total     int64             `json:"total"`
	LastHour  int64             `json:"lastHour"`
	Curves    map[string]int64  `json:"curves"` // curve name (hour, day, month, year) -> its total
	Steps     map[string]string `json:"steps"`  // curve name -> step
	Bars      int               `json:"bars"`   // drawn bars, all charts
	TopDay    []Row             `json:"topDay"`
	TopEver   []Row             `json:"topEver"`
	Decisions []string          `json:"decisions"` // "rule kind:subject", newest first
	// Unique visitors, -1 (and none) when the page shows no visitors.
	Visitors         int64            `json:"visitors"`         // ever
	VisitorsLastHour int64            `json:"visitorsLastHour"` // last hour
	VisitorsLastDay  int64            `json:"visitorsLastDay"`  // last 24 hours
	TopVisitors      []Row            `json:"topVisitors"`      // Value: visitors, last 24 hours
	PeakVisitors     map[string]int64 `json:"peakVisitors"`     // curve name -> peak visitors of a step
	VisitorLines     int              `json:"visitorLines"`     // drawn visitor lines, all charts
}

const readPage = `(() => {
	const num = (el) => el ? Number(el.dataset.value) : -1;
	const rows = (id) => [...document.querySelectorAll('#' + id + ' tbody tr[data-subject]')].map(r =>
		({kind: r.dataset.kind, subject: r.dataset.subject, value: Number(r.dataset.value)}));
	const curves = {}, steps = {}, peakVisitors = {};
	for (const f of document.querySelectorAll('figure.curve')) {
		curves[f.id.slice(6)] = Number(f.dataset.total);
		steps[f.id.slice(6)] = f.dataset.step;
		if (f.dataset.peakVisitors !== undefined) peakVisitors[f.id.slice(6)] = Number(f.dataset.peakVisitors);
	}
	return {
		action: document.getElementById('action').value,
		total: num(document.getElementById('total')),
		lastHour: num(document.getElementById('last-hour')),
		curves, steps,
		bars: document.querySelectorAll('svg.chart rect.bar').length,
		topDay: rows('top-day'), topEver: rows('top-ever'),
		decisions: [...document.querySelectorAll('#decisions tbody tr[data-rule]')].map(r => r.dataset.rule + ' ' + r.dataset.subject),
		visitors: num(document.getElementById('visitors-total')),
		visitorsLastHour: num(document.getElementById('visitors-last-hour')),
		visitorsLastDay: num(document.getElementById('visitors-last-day')),
		topVisitors: rows('top-visitors'), peakVisitors,
		visitorLines: document.querySelectorAll('svg.chart polyline.visitors').length,
	};
})()`

// Load opens url and reads the page once it is rendered.
func (b *Browser) Load(ctx context.Context, url string) (*Page, error) {
	ctx, cancel := b.bound(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.ID("total"))); err != nil {
		return nil, fmt.Errorf("load %s: %w", url, err)
	}
	return b.Read(ctx)
}

// Read reads the page as it is now.
func (b *Browser) Read(ctx context.Context) (*Page, error) {
	ctx, cancel := b.bound(ctx, 10*time.Second)
	defer cancel()
	p, err := chromedp.Run(ctx, chromedp.Evaluate[Page](readPage))
	if err != nil {
		return nil, fmt.Errorf("read the dashboard: %w", err)
	}
	return &p, nil
}

// WaitTotal waits until the page, refreshing itself, shows total (at most
// a minute or until ctx ends).
func (b *Browser) WaitTotal(ctx context.Context, total int64) error {
	ctx, cancel := b.bound(ctx, time.Minute)
	defer cancel()
	expr := fmt.Sprintf(`(() => { const e = document.getElementById('total'); return e && Number(e.dataset.value) === %d; })()`, total)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(time.Minute))); err != nil {
		p, _ := b.Read(context.WithoutCancel(ctx))
		shown := int64(-1)
		if p != nil {
			shown = p.Total
		}
		return fmt.Errorf("wait for total %d (shown: %d): %w", total, shown, err)
	}
	return nil
}

// Screenshot returns a PNG of the whole page.
func (b *Browser) Screenshot(ctx context.Context) ([]byte, error) {
	ctx, cancel := b.bound(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return nil, fmt.Errorf("screenshot: %w", err)
	}
	return png, nil
}

// bound derives from the browser's context a context that also ends with
// ctx, after at most d.
func (b *Browser) bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	c, cancel := context.WithTimeout(b.ctx, d)
	stop := context.AfterFunc(ctx, cancel)
	return c, func() { stop(); cancel() }
}
