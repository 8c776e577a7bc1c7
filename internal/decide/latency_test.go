package decide_test

import (
	"context"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/internal/decide"
)

// Every surface's answers are timed (floodgate_limiter_request_seconds),
// degraded ones included: what a latency alert and an SLO read.
func TestRequestLatencyPerSurface(t *testing.T) {
	st := testStoreNoCleanup(t, redisClient(t, deadPort(t)))
	reg := prometheus.NewRegistry()
	lim, err := decide.New(decide.Config{Store: st, Rules: func() *rulesSet { return mustRules(t, testRules) },
		Timeout: 50 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := decide.NewServer(decide.ServerConfig{Limiter: lim, HTTPAddr: "127.0.0.1:0", RLSAddr: "127.0.0.1:0", Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	httpStatus(t, "http://"+srv.HTTPAddr()+"/v1/check?action=login_failed&ip=192.0.2.1")
	if _, err := rlsClient(t, srv.RLSAddr()).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "login_failed",
		Descriptors: []*commonv3.RateLimitDescriptor{descriptor("ip", "192.0.2.1")}}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_limiter_request_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "surface" {
					got[l.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	if got["http"] != 1 || got["rls"] != 1 {
		t.Fatalf("request_seconds samples per surface %v, want http 1 and rls 1", got)
	}
}
