package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
	"github.com/floodgate-dev/floodgate/producer"
)

const operationsDashboard = "grafana/dashboards/floodgate-operations.json"

// promDashboard is what the test reads of a Prometheus dashboard.
type promDashboard struct {
	UID    string `json:"uid"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource *struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// grafanaMacros are replaced as Grafana would before the query reaches
// Prometheus.
var grafanaMacros = strings.NewReplacer("$__rate_interval", "2m", "$__interval", "1m", "$__range", "3h")

// dashboardExprs returns every query of the operations dashboard, its
// macros replaced, by "panel title/refId".
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(operationsDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d promDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", operationsDashboard, err)
	}
	exprs := map[string]string{}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "floodgate-prometheus" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v, %d targets: want the provisioned floodgate-prometheus and a query", p.Title, p.Datasource, len(p.Targets))
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q target %s has no expression", p.Title, tg.RefID)
			}
			exprs[p.Title+"/"+tg.RefID] = grafanaMacros.Replace(tg.Expr)
		}
	}
	if len(exprs) < 20 {
		t.Fatalf("%d queries in %s", len(exprs), operationsDashboard)
	}
	return exprs
}

// TestOperationsDashboardPromQL checks every query of the operations
// dashboard with promtool, as the expression of a recording rule: a typo
// or a wrong function's arguments fails here, not on a wall screen.
func TestOperationsDashboardPromQL(t *testing.T) {
	exprs := dashboardExprs(t)
	// The data source the panels name is provisioned beside the dashboard.
	raw, err := os.ReadFile("grafana/provisioning/datasources/prometheus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds struct {
		Datasources []struct{ UID, Type string } `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(raw, &ds); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ds.Datasources, func(d struct{ UID, Type string }) bool {
		return d.UID == "floodgate-prometheus" && d.Type == "prometheus"
	}) {
		t.Errorf("no provisioned prometheus data source of uid floodgate-prometheus: %+v", ds.Datasources)
	}
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rs []rule
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range exprs {
			if !yield(k) {
				return
			}
		}
	})
	for i, k := range keys {
		rs = append(rs, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: exprs[k]})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []map[string]any{{"name": "operations-dashboard", "rules": rs}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(stacktest.Promtool(t), "check", "rules", f).CombinedOutput(); err != nil {
		for i, k := range keys {
			t.Logf("dashboard:query_%d = %s: %s", i, k, exprs[k])
		}
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// metricRE finds floodgate's metric names in a query: every floodgate
// metric starts with floodgate_; labels and functions never do.
var metricRE = regexp.MustCompile(`\bfloodgate_[a-z0-9_]+\b`)

// TestOperationsDashboardMetricsExist checks that every metric a query of
// the operations dashboard or an alert rule reads is one a real limiter or
// aggregator exports: each runs on the stack and their /metrics are
// scraped, so a renamed metric breaks this test, not the dashboard.
func TestOperationsDashboardMetricsExist(t *testing.T) {
	exprs := dashboardExprs(t)
	alerts, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var ag struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(alerts, &ag); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	for _, g := range ag.Groups {
		for _, r := range g.Rules {
			exprs["alert "+r.Alert] = r.Expr
		}
	}

	exported := scrapeServices(t)
	for what, e := range exprs {
		// String literals hold label values, not metric names.
		e = regexp.MustCompile(`"[^"]*"`).ReplaceAllString(e, `""`)
		for _, name := range metricRE.FindAllString(e, -1) {
			if !exported[name] {
				t.Errorf("%s reads %s, which no floodgate process exports", what, name)
			}
		}
	}
}

// scrapeServices runs an aggregator and a limiter on topics and keys of the
// test's own, makes each decide and count once (so the series a first
// request creates exist), and returns the names of every sample both
// expose (histograms as their _bucket, _sum and _count).
func scrapeServices(t *testing.T) map[string]bool {
	t.Helper()
	bs := stacktest.Brokers(t)
	rdb := stacktest.Redis(t)
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte("rules:\n  - name: login-failed\n    action: login_failed\n    kinds: [ip]\n    limits: [5/1m]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := servicetest.Build(t, servicetest.Floodgate)
	st := servicetest.Stack{Brokers: bs, RedisAddr: stacktest.RedisAddr(), Topic: stacktest.Topic(t, bs, 2),
		Prefix: stacktest.Prefix(t, rdb), Rules: rulesPath}
	// with owner takes, so that their series (and the router's) exist too
	agg := servicetest.Aggregator(t, bin, st, "--no-history",
		"--owner-takes", "--takes-http-addr", "127.0.0.1:0", "--takes-rls-addr", "off", "--takes-peer-addr", "127.0.0.1:0")
	lim := servicetest.Limiter(t, bin, st)
	resp, err := http.Get(lim.URL + "/v1/check?action=login_failed&ip=192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	// Six events over 5/1m: the live group decides (its decisions series
	// are per rule), the relay publishes.
	pub, err := producer.New(producer.Config{Brokers: bs, Topic: st.Topic, BatchTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pub.Close(); err != nil {
			t.Error(err)
		}
	}()
	evs := make([]event.Event, 6)
	for i := range evs {
		evs[i] = event.Event{ID: event.NewID(), Action: "login_failed", Kind: "ip", Subject: "192.0.2.9", TS: time.Now()}
	}
	if err := pub.Publish(context.Background(), evs...); err != nil {
		t.Fatal(err)
	}

	names := map[string]bool{}
	scrape := func(svc *servicetest.Service) map[string]bool {
		got := map[string]bool{}
		resp, err := http.Get(svc.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "" || line[0] == '#' {
				continue
			}
			if i := strings.IndexAny(line, "{ "); i > 0 {
				got[line[:i]] = true
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	// The aggregator's partition series come with its assignment, its
	// decisions' with the first.
	stacktest.WaitFor(t, "the aggregator to decide and publish", 30*time.Second, func() bool {
		got := scrape(agg)
		return got["floodgate_aggregator_lag_messages"] && got["floodgate_live_decisions_total"] && got["floodgate_live_decisions_published_total"]
	})
	for _, svc := range []*servicetest.Service{agg, lim} {
		for n := range scrape(svc) {
			names[n] = true
		}
	}
	return names
}
