package decide_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
	"github.com/prometheus/client_golang/prometheus"
)

// Strict takes honour overrides: concurrent takes admit exactly each
// subject's own limit (a plan's, a named subject's, the rule's), and the
// answer says which one, in its limits and its RateLimit fields.
func TestStrictTakeAdmitsEachSubjectsOverride(t *testing.T) {
	e := newEnv(t)
	e.set = mustRules(t, `
plans:
  email: {Small@Example.com: small}
rules:
  - name: reset
    action: password_reset
    kinds: [email]
    limits: [10/m, 50/h]
    strict: true
    overrides:
      - plan: small
        scale: 0.2
      - subjects: [vip@example.com]
        limits: [25/m]
`)
	ctx := context.Background()
	want := map[string]int64{"small@example.com": 2, "vip@example.com": 25, "plain@example.com": 10}
	got := map[string]*atomic.Int64{}
	var wg sync.WaitGroup
	for subj := range want {
		got[subj] = &atomic.Int64{}
		for range 60 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := e.lim.Take(ctx, decide.Request{Action: "password_reset", Subjects: []decide.Subject{{Kind: "email", Subject: subj}}})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					got[subj].Add(1)
				}
			}()
		}
	}
	wg.Wait()
	for subj, n := range want {
		if got[subj].Load() != n {
			t.Errorf("%s: %d of 60 takes admitted, want exactly %d", subj, got[subj].Load(), n)
		}
	}
	d, err := e.lim.Check(ctx, decide.Request{Action: "password_reset", Exact: true, Subjects: []decide.Subject{{Kind: "email", Subject: "small@example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Denial.Limit != 2 || d.Limits[0].Limit != 2 || d.Limits[0].Override != "plan small" || d.Limits[1].Limit != 10 {
		t.Fatalf("check of the small plan's subject: %+v", d)
	}
	if pol, _, _ := limitapi.Fields(d); !strings.Contains(pol, ";q=2;w=60") || !strings.Contains(pol, ";q=10;w=3600") {
		t.Errorf("RateLimit-Policy %q: want the plan's counts", pol)
	}
	if r := limitapi.Result(d); r.Limits[0].Override != "plan small" || r.Limits[0].Limit != 2 {
		t.Errorf("JSON limits: %+v", r.Limits)
	}
}

// An Envoy descriptor's limit replaces the count of the subject's strict
// limit of its unit's window, for a take the limiter's own script counts;
// everywhere else the rules answer and the descriptor is counted as
// ignored, with the reason.
func TestRLSDescriptorLimit(t *testing.T) {
	limited := func(subject string, n uint32, unit typev3.RateLimitUnit) *rlsv3.RateLimitRequest {
		d := descriptor("email", subject)
		d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
		return &rlsv3.RateLimitRequest{Domain: "password_reset", Descriptors: []*commonv3.RateLimitDescriptor{d}}
	}
	admitted := func(t *testing.T, rls rlsv3.RateLimitServiceClient, in *rlsv3.RateLimitRequest) int {
		n := 0
		for range 15 {
			resp, err := rls.ShouldRateLimit(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode == rlsv3.RateLimitResponse_OK {
				n++
			}
		}
		return n
	}
	for _, tt := range []struct {
		name     string
		mode     decide.RLSMode
		honour   bool
		in       *rlsv3.RateLimitRequest
		admitted int
		outcome  string
	}{
		{"take, the script counts", decide.RLSTake, true, limited("a@example.com", 3, typev3.RateLimitUnit_MINUTE), 3, "honoured"},
		{"take, a higher limit", decide.RLSTake, true, limited("b@example.com", 12, typev3.RateLimitUnit_MINUTE), 12, "honoured"},
		{"take, no such window", decide.RLSTake, true, limited("c@example.com", 3, typev3.RateLimitUnit_SECOND), 10, "ignored_no_window"},
		{"take, a month", decide.RLSTake, true, limited("d@example.com", 3, typev3.RateLimitUnit_MONTH), 10, "ignored_unit"},
		{"take, owner takes", decide.RLSTake, false, limited("e@example.com", 3, typev3.RateLimitUnit_MINUTE), 10, "ignored_taker"},
		{"check", decide.RLSCheck, true, limited("f@example.com", 3, typev3.RateLimitUnit_MINUTE), 15, "ignored_check"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			e := newEnv(t, withRegistry(reg), func(c *decide.Config, s *decide.ServerConfig) {
				s.RLSMode, c.DescriptorLimits = tt.mode, tt.honour
			})
			if got := admitted(t, rlsClient(t, e.srv.RLSAddr()), tt.in); got != tt.admitted {
				t.Errorf("%d of 15 admitted, want %d", got, tt.admitted)
			}
			if got := outcomeCount(t, reg, tt.outcome); got != 15 {
				t.Errorf("floodgate_limiter_descriptor_limits_total{outcome=%q} = %v, want 15", tt.outcome, got)
			}
		})
	}
}

// outcomeCount is floodgate_limiter_descriptor_limits_total{outcome}.
func outcomeCount(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_limiter_descriptor_limits_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
