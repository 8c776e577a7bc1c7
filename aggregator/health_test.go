package aggregator

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// The aggregator's /healthz answers a failing dependency by its name: the
// Redis error, which names addresses, goes to the log, not to whoever
// probes the listener.
func TestAggregatorHealthNamesNoAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, port, _ := net.SplitHostPort(down)

	get := func(rdb redis.UniversalClient) (int, string, string) {
		t.Helper()
		var log bytes.Buffer
		c := &Config{}
		srv := httptest.NewServer(c.mux(prometheus.NewRegistry(), rdb, &atomic.Bool{}, slog.New(slog.NewTextHandler(&log, nil))))
		defer srv.Close()
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), log.String()
	}

	rdb := redis.NewClient(&redis.Options{Addr: down, MaxRetries: -1})
	defer rdb.Close()
	code, body, log := get(rdb)
	if code != http.StatusServiceUnavailable || body != "redis unavailable\n" || strings.Contains(body, port) {
		t.Errorf("/healthz with Redis down: %d %q; want 503 \"redis unavailable\" and no address", code, body)
	}
	if !strings.Contains(log, port) || !strings.Contains(log, "redis does not answer") {
		t.Errorf("the Redis error was not logged: %q", log)
	}

	if code, body, _ := get(stacktest.Redis(t)); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz with Redis up: %d %q", code, body)
	}
}
