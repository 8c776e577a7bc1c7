package dashboardtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/dashboard"
	"github.com/floodgate-dev/floodgate/internal/dashboard/dashboardtest"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
	"github.com/floodgate-dev/floodgate/producer"
)

const testRules = `rules:
  - name: link-visit
    action: visit
    kinds: [ip]
    limits: [3/m]
    message: Too many visits.
`

// pipeline is the real path from Kafka to the dashboard: a topic of the
// test's own, the aggregator binary writing history into a database of the
// test's own and deny decisions to a topic of the test's own.
type pipeline struct {
	st  servicetest.Stack
	pub *producer.Publisher
	hq  *history.Querier
}

func newPipeline(t *testing.T) *pipeline {
	t.Helper()
	brokers := stacktest.Brokers(t)
	pool := historytest.Pool(t)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &pipeline{st: servicetest.Stack{
		Brokers: brokers, RedisAddr: stacktest.RedisAddr(), PostgresURL: pool.Config().ConnString(),
		Topic: stacktest.Topic(t, brokers, 3), DecisionsTopic: stacktest.Topic(t, brokers, 1),
		Prefix: stacktest.Prefix(t, stacktest.Redis(t)), Rules: rules,
	}}
	p.hq = history.NewQuerier(historytest.ReaderPool(t, pool)) // as the dashboard reads: floodgate_reader
	servicetest.Aggregator(t, servicetest.Build(t, servicetest.Floodgate), p.st, "--visitors", "visit=ip")
	pub, err := producer.New(producer.Config{Brokers: brokers, Topic: p.st.Topic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	p.pub = pub
	return p
}

// visits publishes n visits of link code from ip: the link's event and the
// IP's, as the shortener does.
func (p *pipeline) visits(t *testing.T, code, ip string, n int) {
	t.Helper()
	var evs []event.Event
	now := time.Now()
	for range n {
		evs = append(evs,
			event.Event{ID: event.NewID(), Action: "visit", Kind: "link", Subject: code, TS: now, Attrs: map[string]string{"ip": ip}},
			event.Event{ID: event.NewID(), Action: "visit", Kind: "ip", Subject: ip, TS: now, Attrs: map[string]string{"link": code}})
	}
	if err := p.pub.Publish(context.Background(), evs...); err != nil {
		t.Fatal(err)
	}
}

// waitHistory waits until PostgreSQL holds want events of key.
func (p *pipeline) waitHistory(t *testing.T, k history.Key, want int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := p.hq.Total(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("history holds %d events of %s, want %d", n, k, want)
		}
		time.Sleep(50 * time.Millisecond) // polling PostgreSQL for the condition
	}
}

// testToken is the dashboard's token in the tests that load it.
const testToken = "dashboard-test-token-0123456789"

func (p *pipeline) dashboard(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	recent := dashboard.NewRecent(20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		dashboard.Follow(ctx, p.st.Brokers, p.st.DecisionsTopic, recent, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	h, err := dashboard.New(dashboard.Config{History: p.hq, Recent: recent, Refresh: 300 * time.Millisecond, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return srv.URL
}

// A known stream through the real pipeline, then the page in Chromium:
// totals, curves, top links and the deny decision the aggregator made are
// in the DOM, the page refreshes by itself, and logs no console error.
func TestDashboardInChromium(t *testing.T) {
	chromium := stacktest.Chromium(t)
	p := newPipeline(t)
	p.visits(t, "abc", "198.51.100.1", 4)
	p.visits(t, "abc", "198.51.100.2", 3)
	p.visits(t, "xyz", "198.51.100.3", 3)
	p.waitHistory(t, history.Key{Action: "visit", Kind: "link"}, 10)
	url := p.dashboard(t)

	ctx := context.Background()
	b, err := dashboardtest.Start(ctx, chromium, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Token(ctx, testToken); err != nil {
		t.Fatal(err)
	}
	page, err := b.Load(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if page.Action != "visit" || page.Total != 10 || page.LastHour != 10 {
		t.Errorf("page shows %s total %d, last hour %d; want visit 10, 10", page.Action, page.Total, page.LastHour)
	}
	for _, name := range []string{"hour", "day", "month", "year"} {
		if page.Curves[name] != 10 {
			t.Errorf("curve %s: total %d, want 10", name, page.Curves[name])
		}
	}
	if want := map[string]string{"hour": "1m", "day": "5m", "month": "1h", "year": "1d"}; !equalMaps(page.Steps, want) {
		t.Errorf("steps %v, want %v (the ladder's resolutions)", page.Steps, want)
	}
	want := []dashboardtest.Row{{Kind: "link", Subject: "abc", Value: 7}, {Kind: "link", Subject: "xyz", Value: 3}}
	if !slices.Equal(page.TopDay, want) || !slices.Equal(page.TopEver, want) || page.Bars < 4 {
		t.Errorf("top %v / %v, %d bars; want %v in both and bars drawn", page.TopDay, page.TopEver, page.Bars, want)
	}
	// Unique visitors beside the visits (--visitors visit=ip): three IPs,
	// abc visited by two of them, xyz by one; a line on every chart.
	if page.Visitors != 3 || page.VisitorsLastHour != 3 || page.VisitorsLastDay != 3 {
		t.Errorf("visitors ever %d, last hour %d, last day %d; want 3, 3, 3", page.Visitors, page.VisitorsLastHour, page.VisitorsLastDay)
	}
	wantVis := []dashboardtest.Row{{Kind: "link", Subject: "abc", Value: 2}, {Kind: "link", Subject: "xyz", Value: 1}}
	if !slices.Equal(page.TopVisitors, wantVis) || page.VisitorLines != 4 {
		t.Errorf("top by visitors %v, %d visitor lines; want %v and 4", page.TopVisitors, page.VisitorLines, wantVis)
	}
	for _, name := range []string{"hour", "day", "month", "year"} {
		// Every visit is of the last second, in one step or two.
		if v := page.PeakVisitors[name]; v < 2 || v > 3 {
			t.Errorf("curve %s: peak visitors %d, want 2 or 3", name, v)
		}
	}

	// 198.51.100.1 visited 4 times within a minute: over 3/m, a deny
	// decision on the decisions topic, shown once read.
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Contains(page.Decisions, "link-visit ip:198.51.100.1") {
		if time.Now().After(deadline) {
			t.Fatalf("decisions shown: %v; want link-visit ip:198.51.100.1", page.Decisions)
		}
		if page, err = b.Read(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// New visits show without a reload.
	p.visits(t, "xyz", "198.51.100.4", 5)
	p.waitHistory(t, history.Key{Action: "visit", Kind: "link"}, 15)
	if err := b.WaitTotal(ctx, 15); err != nil {
		t.Fatal(err)
	}
	if page, err = b.Read(ctx); err != nil {
		t.Fatal(err)
	}
	// A fourth visitor, of xyz: tied with abc at two, and first by visits.
	wantVis = []dashboardtest.Row{{Kind: "link", Subject: "xyz", Value: 2}, {Kind: "link", Subject: "abc", Value: 2}}
	if page.Visitors != 4 || !slices.Equal(page.TopVisitors, wantVis) {
		t.Errorf("after a new visitor: %d visitors, top %v; want 4, %v", page.Visitors, page.TopVisitors, wantVis)
	}

	png, err := b.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10_000 {
		t.Errorf("screenshot: %d bytes, not a PNG of a page", len(png))
	}
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", shot, len(png))
	// Opt-in: keep a copy (make screenshot writes the README's from the demo).
	if keep := os.Getenv("FLOODGATE_DASHBOARD_SCREENSHOT"); keep != "" {
		if err := os.WriteFile(keep, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Visits by IP carry no ip attr: no visitors are shown for that kind.
	if page, err = b.Load(ctx, url+"?action=visit&kind=ip"); err != nil {
		t.Fatal(err)
	}
	if page.Total != 15 || page.Visitors != -1 || len(page.TopVisitors) != 0 || page.VisitorLines != 0 {
		t.Errorf("visit by ip: total %d, visitors %d, top %v, %d lines; want 15 and no visitors", page.Total, page.Visitors, page.TopVisitors, page.VisitorLines)
	}
	if errs := b.ConsoleErrors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Bad parameters are a 400 with the reason, in JSON on /api/summary.
func TestBadParameters(t *testing.T) {
	pool := historytest.Pool(t)
	h, err := dashboard.New(dashboard.Config{History: history.NewQuerier(pool)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct {
		path, want string
		status     int
	}{
		{"/api/summary", "", 200},
		{"/api/summary?action=login_failed&kind=ip&top=3", "", 200},
		{"/api/summary?action=Visit", "only [a-z0-9_.-]", 400},
		{"/api/summary?action=", "action is required", 400},
		{"/api/summary?kind=a%20b", "kind", 400},
		{"/api/summary?top=0", "1..100", 400},
		{"/api/summary?top=many", "1..100", 400},
		{"/api/summary?from=yesterday", "unknown parameter", 400},
		{"/?top=1000", "1..100", 400},
		{"/panel?action=x%00", "action", 400},
		{"/nope", "", 404},
	} {
		resp, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: %d %s; want %d with %q", tc.path, resp.StatusCode, body, tc.status, tc.want)
		}
		if strings.HasPrefix(tc.path, "/api/") {
			var v map[string]any
			if err := json.Unmarshal(body, &v); err != nil || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s: not JSON: %s", tc.path, body)
			}
		}
	}
}

// With a token, every route but /healthz and /metrics answers 401 without
// it (a challenge a browser answers with HTTP Basic): the page shows
// personal subjects. The token is taken as a Bearer token or as Basic's
// password.
func TestDashboardRequiresToken(t *testing.T) {
	pool := historytest.Pool(t)
	reg := prometheus.NewRegistry()
	h, err := dashboard.New(dashboard.Config{History: history.NewQuerier(historytest.ReaderPool(t, pool)), Token: testToken, Registerer: reg, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string, auth func(*http.Request)) (int, http.Header, string) {
		t.Helper()
		r, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != nil {
			auth(r)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	bearer := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	for _, path := range []string{"/", "/panel", "/api/summary", "/static/refresh.js"} {
		for name, auth := range map[string]func(*http.Request){
			"no token":        nil,
			"a wrong token":   bearer("not-the-token"),
			"a wrong Basic":   func(r *http.Request) { r.SetBasicAuth("ops", "not-the-token") },
			"an empty Bearer": bearer(""),
		} {
			code, hdr, body := get(path, auth)
			if code != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Basic ") || strings.Contains(body, "visit") {
				t.Errorf("%s with %s: %d %q (WWW-Authenticate %q); want 401 and a Basic challenge", path, name, code, body, hdr.Get("WWW-Authenticate"))
			}
		}
		for name, auth := range map[string]func(*http.Request){
			"the Bearer token": bearer(testToken),
			"Basic":            func(r *http.Request) { r.SetBasicAuth("anyone", testToken) },
		} {
			if code, _, body := get(path, auth); code != http.StatusOK {
				t.Errorf("%s with %s: %d %.80q; want 200", path, name, code, body)
			}
		}
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		if code, _, _ := get(path, nil); code != http.StatusOK {
			t.Errorf("%s without a token: %d; want 200 (probes and scrapers)", path, code)
		}
	}
}

// The serving binary embeds the dashboard but links no browser driver,
// harness or example.
func TestServingBinaryLinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", servicetest.Floodgate).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{"github.com/chromedp/", "github.com/floodgate-dev/floodgate/bench", "github.com/floodgate-dev/floodgate/examples", "github.com/floodgate-dev/floodgate/internal/dashboard/dashboardtest", "github.com/floodgate-dev/floodgate/internal/stacktest", "github.com/floodgate-dev/floodgate/demo"} {
			if strings.HasPrefix(dep, bad) {
				t.Errorf("floodgate links %s", dep)
			}
		}
	}
}
