package decide_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/internal/decide"
)

// /readyz names the dependency that is not ready, never its address; with
// MetricsAuth, /metrics wants the token as /v1/* does.
func TestReadyzAndMetricsShowNoInternals(t *testing.T) {
	addr := deadPort(t)
	st := testStoreNoCleanup(t, redisClient(t, addr))
	lim, err := decide.New(decide.Config{Store: st, Rules: func() *rulesSet { return mustRules(t, testRules) }, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decide.NewServer(decide.ServerConfig{Limiter: lim, MetricsAuth: true, Gatherer: prometheus.NewRegistry()}); err == nil {
		t.Error("metrics auth without a token accepted")
	}
	for _, metricsAuth := range []bool{false, true} {
		srv, err := decide.NewServer(decide.ServerConfig{Limiter: lim, HTTPAddr: "127.0.0.1:0", RLSAddr: "off",
			AuthToken: "s3cret", MetricsAuth: metricsAuth, Gatherer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		base := "http://" + srv.HTTPAddr()
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || string(b) != "not ready: redis\n" {
			t.Errorf("/readyz with Redis at %s down: %d %q, want 503 \"not ready: redis\"", addr, resp.StatusCode, b)
		}
		want := http.StatusOK
		if metricsAuth {
			want = http.StatusUnauthorized
		}
		if s := httpStatus(t, base+"/metrics"); s != want {
			t.Errorf("metrics auth %v: /metrics without a token %d, want %d", metricsAuth, s, want)
		}
		mreq, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
		mreq.Header.Set("Authorization", "Bearer s3cret")
		mresp, err := http.DefaultClient.Do(mreq)
		if err != nil {
			t.Fatal(err)
		}
		_ = mresp.Body.Close()
		if mresp.StatusCode != http.StatusOK {
			t.Errorf("metrics auth %v: /metrics with the token %d", metricsAuth, mresp.StatusCode)
		}
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}
}
