package limiterclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
	"github.com/floodgate-dev/floodgate/limiter/limiterclient"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  limiterclient.Config
		want string // "" for valid
	}{
		{"minimal", limiterclient.Config{BaseURL: "http://127.0.0.1:8080"}, ""},
		{"connect", limiterclient.Config{BaseURL: "http://127.0.0.1:8080", Protocol: "connect"}, ""},
		{"no url", limiterclient.Config{}, "base URL"},
		{"protocol", limiterclient.Config{BaseURL: "http://x", Protocol: "rest"}, "protocol"},
		{"timeout", limiterclient.Config{BaseURL: "http://x", Timeout: -time.Second}, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
			if _, nerr := limiterclient.New(tc.cfg); (nerr == nil) != (err == nil) {
				t.Fatalf("New and Validate disagree: %v, %v", nerr, err)
			}
		})
	}
}

// The client against the real limiter, over both protocols: an IP the
// aggregator's write path counted over its limit is denied with the rule,
// the limit and a retry time; another is allowed; a request the limiter
// refuses matches limitapi.ErrRefused; a wrong token is no answer.
func TestClientAgainstTheLimiter(t *testing.T) {
	rdb := stacktest.Redis(t)
	store, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: func() int { return 2 }})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse([]byte("rules:\n  - name: login-failed\n    action: login_failed\n    kinds: [ip]\n    limits: [2/1m]\n"))
	if err != nil {
		t.Fatal(err)
	}
	const denied, allowed = "203.0.113.7", "203.0.113.8"
	countOver(t, store, set, denied, 3)

	lim, err := decide.New(decide.Config{Store: store, Rules: func() *rules.Set { return set }, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const token = "client-test-token-0123456789"
	srv, err := decide.NewServer(decide.ServerConfig{Limiter: lim, HTTPAddr: "127.0.0.1:0", RLSAddr: "off", AuthToken: token})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	base := "http://" + srv.HTTPAddr()
	ctx := context.Background()
	ip := func(s string) limitapi.Request {
		return limitapi.Request{Action: "login_failed", Subjects: []limitapi.Subject{{Kind: "ip", Subject: s}}}
	}
	for _, protocol := range []string{"grpc", "connect"} {
		t.Run(protocol, func(t *testing.T) {
			c, err := limiterclient.New(limiterclient.Config{BaseURL: base, Protocol: protocol, Token: token, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			d, err := c.Check(ctx, ip(denied))
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || d.Denial == nil || d.Denial.Rule != "login-failed" || d.Denial.Limit != 2 || d.RetryAfter() <= 0 {
				t.Fatalf("check of %s: %+v (denial %+v), want denied by login-failed 2/1m with a retry time", denied, d, d.Denial)
			}
			if d, err := c.Check(ctx, ip(allowed)); err != nil || !d.Allowed {
				t.Fatalf("check of %s: %+v, %v; want allowed", allowed, d, err)
			}
			if _, err := c.Check(ctx, limitapi.Request{Action: "login_failed"}); !errors.Is(err, limitapi.ErrRefused) {
				t.Fatalf("a request without subjects: %v, want limitapi.ErrRefused", err)
			}
			wrong, err := limiterclient.New(limiterclient.Config{BaseURL: base, Protocol: protocol, Token: "wrong", Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := wrong.Check(ctx, ip(denied)); connect.CodeOf(err) != connect.CodeUnauthenticated || errors.Is(err, limitapi.ErrRefused) {
				t.Fatalf("a wrong token: %v, want unauthenticated, not refused", err)
			}
		})
	}
}

// countOver counts n events of an IP the way the aggregator does.
func countOver(t *testing.T, store *window.Store, set *rules.Set, ip string, n int) {
	t.Helper()
	ap, err := live.NewApplier(store, live.ApplierConfig{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p := window.Partition(window.Subject{Action: "login_failed", Kind: "ip", Subject: ip}, 2)
	b := consume.Batch{Topic: "t", Partition: p, First: 0, Last: int64(n - 1)}
	for i := range n {
		b.Records = append(b.Records, consume.Record{Offset: int64(i), Event: event.Event{
			V: 1, ID: event.NewID(), Action: "login_failed", Kind: "ip", Subject: ip, TS: now, N: 1}})
	}
	if _, err := ap.Apply(context.Background(), "test", b, set, now, live.NewHeadroom(1000)); err != nil {
		t.Fatal(err)
	}
}

// A limiter that does not answer within Timeout is an error the caller can
// tell (a deadline), not a wait for ever.
func TestTimeoutBoundsACall(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hang.Close()
	defer close(release) // before Close, which waits for the handler
	c, err := limiterclient.New(limiterclient.Config{BaseURL: hang.URL, Protocol: "connect", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Check(context.Background(), limitapi.Request{Action: "login_failed", Subjects: []limitapi.Subject{{Kind: "ip", Subject: "192.0.2.1"}}})
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || errors.Is(err, limitapi.ErrRefused) {
		t.Fatalf("a limiter that never answers: %v, want a deadline", err)
	}
}
