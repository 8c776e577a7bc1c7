package decide_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/rules"
)

// decisions reads floodgate_limiter_decisions_total as "rule/outcome" →
// value.
func decisions(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_limiter_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var rule, outcome string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "rule":
					rule = l.GetValue()
				case "outcome":
					outcome = l.GetValue()
				}
			}
			out[rule+"/"+outcome] = m.GetCounter().GetValue()
		}
	}
	return out
}

// Each decision counts every rule it read once, with that rule's verdict:
// allowed, near (10 % of a limit or less left), denied, shadow_denied; an
// allowlisted subject is allowed. Series exist at zero from the start, only
// for the rules file's rules, and a reload drops the removed rules' series.
func TestDecisionsPerRule(t *testing.T) {
	reg := prometheus.NewRegistry()
	var cur atomic.Pointer[rules.Set]
	cur.Store(mustRules(t, testRules))
	e := newEnv(t, withRegistry(reg), func(c *decide.Config, _ *decide.ServerConfig) { c.Rules = cur.Load })
	ctx := context.Background()
	got := decisions(t, reg)
	if len(got) != 4*4 || got["login-failed/allowed"] != 0 || got["other/near"] != 0 {
		t.Fatalf("series before any decision: %v, want the 3 rules and other, 4 outcomes each, at 0", got)
	}
	check := func(action, kind, subject string, exact bool) decide.Decision {
		t.Helper()
		d, err := e.lim.Check(ctx, decide.Request{Action: action, Exact: exact, Subjects: []decide.Subject{{Kind: kind, Subject: subject}}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	now := time.Now()
	// Two subjects of one rule in one decision: counted once.
	d, err := e.lim.Check(ctx, decide.Request{Action: "login_failed", Subjects: []decide.Subject{{Kind: "ip", Subject: "192.0.2.60"}, {Kind: "email", Subject: "a@example.com"}}})
	if err != nil || !d.Allowed {
		t.Fatalf("check: %+v %v", d, err)
	}
	e.apply(t, "login_failed", "ip", "192.0.2.61", 4, now) // 1 of 5/1m left: near
	check("login_failed", "ip", "192.0.2.61", false)
	check("login_failed", "ip", "192.0.2.61", true)
	e.apply(t, "login_failed", "ip", "192.0.2.61", 1, now) // 5/1m: denied
	if d := check("login_failed", "ip", "192.0.2.61", true); d.Allowed {
		t.Fatalf("5 of 5/1m allowed: %+v", d)
	}
	e.apply(t, "login_failed", "ip", "10.1.2.3", 6, now) // allowlisted: allowed
	check("login_failed", "ip", "10.1.2.3", true)
	e.apply(t, "visit", "ip", "192.0.2.62", 3, now) // shadow 3/1m
	if d := check("visit", "ip", "192.0.2.62", true); !d.Allowed || len(d.ShadowDenials) != 1 {
		t.Fatalf("shadow rule over its limit: %+v", d)
	}
	// Through the HTTP and RLS surfaces too: both decide through Check.
	if code := httpStatus(t, "http://"+e.srv.HTTPAddr()+"/v1/check?action=login_failed&ip=192.0.2.61"); code != http.StatusTooManyRequests {
		t.Fatalf("HTTP check: %d", code)
	}
	if _, err := rlsClient(t, e.srv.RLSAddr()).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "login_failed",
		Descriptors: []*commonv3.RateLimitDescriptor{descriptor("ip", "192.0.2.63")}}); err != nil {
		t.Fatal(err)
	}
	check("nothing", "ip", "192.0.2.60", false) // no rule: nothing counted

	want := map[string]float64{
		"login-failed/allowed": 3, // the pair, 10.1.2.3, the RLS check
		"login-failed/near":    2,
		"login-failed/denied":  2, // exact check, HTTP check
		"visit/shadow_denied":  1,
		"visit/allowed":        0,
		"password-reset/near":  0,
	}
	got = decisions(t, reg)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}

	// A reload renames visit: its series go, the new rule's come at zero,
	// the others keep their counts.
	cur.Store(mustRules(t, strings.Replace(testRules, "name: visit", "name: visits", 1)))
	check("visit", "ip", "192.0.2.62", true)
	got = decisions(t, reg)
	if _, ok := got["visit/shadow_denied"]; ok || got["visits/shadow_denied"] != 1 || got["login-failed/denied"] != 2 || len(got) != 4*4 {
		t.Fatalf("after a reload renaming visit: %v", got)
	}
}
