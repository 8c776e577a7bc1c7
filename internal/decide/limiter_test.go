package decide_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/strict"
	"github.com/floodgate-dev/floodgate/internal/window"
	floodgatev1 "github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1"
	"github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1/floodgatev1connect"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

func httpGet(t *testing.T, rawURL string, hdr map[string]string) (*http.Response, limitapi.CheckResult) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := resp.Body.Close(); err != nil {
			t.Error(err)
		}
	}()
	var body limitapi.CheckResult
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: body: %v", rawURL, err)
	}
	return resp, body
}

func checkURL(e *env, params ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(params); i += 2 {
		q.Add(params[i], params[i+1])
	}
	return "http://" + e.srv.HTTPAddr() + "/v1/check?" + q.Encode()
}

func rlsClient(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := conn.Close(); err != nil {
			t.Error(err)
		}
	})
	return rlsv3.NewRateLimitServiceClient(conn)
}

func descriptor(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// Events over a limit, counted by the aggregator's write path, deny through
// all three surfaces with the rule, the headers and the retry time; allowed
// lookups report the remaining quota.
func TestSurfacesDenyOverLimit(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	const ip, email = "203.0.113.7", "victim@example.com"
	e.apply(t, "login_failed", "ip", ip, 6, now)       // over 5/1m: deny record
	e.apply(t, "login_failed", "email", email, 2, now) // under
	ctx := context.Background()

	// HTTP.
	resp, body := httpGet(t, checkURL(e, "action", "login_failed", "ip", ip, "email", email), nil)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("HTTP status %d, want 429 (%+v)", resp.StatusCode, body)
	}
	if body.Rule != "login-failed" || body.Kind != "ip" || body.Window != "1m" || body.Limit != 5 || body.Message != "Too many failed logins. Try again later." {
		t.Errorf("HTTP body %+v", body)
	}
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil || ra < 55 || ra > 61 {
		t.Errorf("Retry-After %q, want about 60", resp.Header.Get("Retry-After"))
	}
	if p := resp.Header.Get("RateLimit-Policy"); !strings.Contains(p, `"login-failed/ip/1m";q=5;w=60`) || !strings.Contains(p, `"login-failed/email/1h";q=10;w=3600`) {
		t.Errorf("RateLimit-Policy %q", p)
	}
	rl := resp.Header.Get("RateLimit")
	if !strings.Contains(rl, `"login-failed/ip/1m";r=0;t=`+strconv.Itoa(ra)) || !strings.Contains(rl, `"login-failed/email/1m";r=3;t=60`) {
		t.Errorf("RateLimit %q (Retry-After %d)", rl, ra)
	}

	// Allowed: remaining quota. From memory, the e-mail is under half of
	// both limits: remaining is a lower bound (5-2 and 10-4); an exact
	// check reads the counts (2 of each).
	for _, tc := range []struct {
		exact    string
		m, h     int64
		estimate bool
	}{{"0", 3, 6, true}, {"1", 3, 8, false}} {
		resp, body = httpGet(t, checkURL(e, "action", "login_failed", "email", email), map[string]string{limitapi.HeaderExact: tc.exact})
		if resp.StatusCode != http.StatusOK || !body.Allowed {
			t.Fatalf("allowed lookup: status %d body %+v", resp.StatusCode, body)
		}
		rem := map[string]int64{}
		for _, l := range body.Limits {
			rem[l.Window] = l.Remaining
			if l.Estimated != tc.estimate {
				t.Errorf("exact=%s: limit %+v estimated=%v, want %v", tc.exact, l, l.Estimated, tc.estimate)
			}
		}
		if rem["1m"] != tc.m || rem["1h"] != tc.h {
			t.Errorf("exact=%s: remaining %v, want 1m:%d 1h:%d", tc.exact, rem, tc.m, tc.h)
		}
	}
	// nginx auth_request wants 403.
	resp, _ = httpGet(t, checkURL(e, "action", "login_failed", "ip", ip), map[string]string{limitapi.HeaderDenyStatus: "403"})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("with %s: 403: got %d", limitapi.HeaderDenyStatus, resp.StatusCode)
	}

	// Connect, over the gRPC protocol on h2c and over Connect JSON.
	for name, opts := range map[string][]connect.ClientOption{"grpc": {connect.WithGRPC()}, "connect-json": {connect.WithProtoJSON()}} {
		c := floodgatev1connect.NewLimiterClient(h2cClient(), "http://"+e.srv.HTTPAddr(), opts...)
		res, err := c.Check(ctx, connect.NewRequest(&floodgatev1.CheckRequest{Action: "login_failed", Subjects: []*floodgatev1.Subject{{Kind: "ip", Subject: ip}, {Kind: "email", Subject: email}}}))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m := res.Msg
		if m.Allowed || m.Denial.GetRule() != "login-failed" || m.Denial.GetSubject() != ip || m.Denial.GetWindow().AsDuration() != time.Minute {
			t.Errorf("%s: %v", name, m)
		}
		if r := m.Denial.GetRetryAfter().AsDuration(); r < 55*time.Second || r > 61*time.Second {
			t.Errorf("%s: retry after %s", name, r)
		}
		if len(m.Limits) != 4 {
			t.Errorf("%s: %d limits, want 4", name, len(m.Limits))
		}
	}

	// A plain grpc-go client on the Connect port (h2c).
	conn, err := grpc.NewClient(e.srv.HTTPAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	var out floodgatev1.CheckResponse
	err = conn.Invoke(ctx, "/floodgate.v1.Limiter/Check", &floodgatev1.CheckRequest{Action: "login_failed", Subjects: []*floodgatev1.Subject{{Kind: "ip", Subject: ip}}}, &out)
	if err != nil || out.Allowed || out.Denial.GetRule() != "login-failed" {
		t.Errorf("grpc-go: %v %v", err, &out)
	}

	// Envoy RLS.
	rls := rlsClient(t, e.srv.RLSAddr())
	rr, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "login_failed", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("ip", ip), descriptor("email", email)}})
	if err != nil {
		t.Fatal(err)
	}
	if rr.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(rr.Statuses) != 2 {
		t.Fatalf("RLS: %v", rr)
	}
	s0, s1 := rr.Statuses[0], rr.Statuses[1]
	if s0.Code != rlsv3.RateLimitResponse_OVER_LIMIT || s0.CurrentLimit.GetRequestsPerUnit() != 5 || s0.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("RLS ip status %v", s0)
	}
	if d := s0.DurationUntilReset.AsDuration(); d < 55*time.Second || d > 61*time.Second {
		t.Errorf("RLS duration_until_reset %s", d)
	}
	if s1.Code != rlsv3.RateLimitResponse_OK || s1.LimitRemaining != 3 {
		t.Errorf("RLS email status %v, want OK with 3 remaining", s1)
	}
	// Envoy answers the 429 with the same header fields as /v1/check.
	rh := map[string]string{}
	for _, h := range rr.ResponseHeadersToAdd {
		rh[h.Key] = h.Value
	}
	if len(rh) != 3 || !strings.HasPrefix(rh["RateLimit-Policy"], `"login-failed/ip/1m";q=5;w=60, `) ||
		!strings.HasPrefix(rh["RateLimit"], `"login-failed/ip/1m";r=0;t=`) || rh["Retry-After"] == "" {
		t.Errorf("RLS response headers %v", rh)
	}
	rr, err = rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "login_failed", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("email", email)}})
	if err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("RLS email only: %v %v", rr, err)
	}
	// Unknown domain: allowed, no limits.
	rr, err = rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "nothing_here", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("ip", ip)}})
	if err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("RLS unknown domain: %v %v", rr, err)
	}
}

// Check denies the request that would be one over: at count == limit, with
// the exact second one more fits; shadow rules report, allowlists never deny.
func TestDecisionSemantics(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now()
	t0 := now.Add(-20 * time.Second)
	e.apply(t, "login_failed", "ip", "192.0.2.1", 1, t0)
	e.apply(t, "login_failed", "ip", "192.0.2.1", 3, now)

	d, err := e.lim.Check(ctx, decide.Request{Action: "login_failed", Subjects: []decide.Subject{{Kind: "ip", Subject: "192.0.2.1"}}})
	if err != nil || !d.Allowed || d.Limits[0].Remaining != 1 {
		t.Fatalf("4 of 5: %+v %v", d, err)
	}
	e.apply(t, "login_failed", "ip", "192.0.2.1", 1, now)
	d, err = e.lim.Check(ctx, decide.Request{Action: "login_failed", Subjects: []decide.Subject{{Kind: "ip", Subject: "192.0.2.1"}}})
	if err != nil || d.Allowed {
		t.Fatalf("5 of 5: want denied: %+v %v", d, err)
	}
	// The oldest event (t0) leaves the minute window at t0+60s.
	want := time.Unix(t0.Unix()+60, 0)
	if !d.Denial.Until.Equal(want) {
		t.Errorf("until %v, want %v", d.Denial.Until, want)
	}

	// Shadow: over, reported, allowed.
	e.apply(t, "visit", "ip", "192.0.2.2", 5, now)
	d, err = e.lim.Check(ctx, decide.Request{Action: "visit", Subjects: []decide.Subject{{Kind: "ip", Subject: "192.0.2.2"}}})
	if err != nil || !d.Allowed || len(d.ShadowDenials) == 0 || d.ShadowDenials[0].Rule != "visit" {
		t.Errorf("shadow: %+v %v", d, err)
	}
	// Allowlisted (CIDR and exact): never denied.
	e.apply(t, "login_failed", "ip", "10.1.2.3", 9, now)
	e.apply(t, "login_failed", "email", "ops@example.com", 9, now)
	d, err = e.lim.Check(ctx, decide.Request{Action: "login_failed", Subjects: []decide.Subject{{Kind: "ip", Subject: "10.1.2.3"}, {Kind: "email", Subject: "ops@example.com"}}})
	if err != nil || !d.Allowed {
		t.Errorf("allowlisted: %+v %v", d, err)
	}
	for _, l := range d.Limits {
		if !l.Allowlisted {
			t.Errorf("limit %+v not marked allowlisted", l)
		}
	}
	// Unknown action: allowed, no limits.
	d, err = e.lim.Check(ctx, decide.Request{Action: "nope", Subjects: []decide.Subject{{Kind: "ip", Subject: "192.0.2.1"}}})
	if err != nil || !d.Allowed || len(d.Limits) != 0 {
		t.Errorf("unknown action: %+v %v", d, err)
	}
}

// Checks are answered from memory: a flood of checks, denied or allowed,
// costs Redis nothing; an exact check costs one round trip per slot.
func TestMemoryChecksNeedNoRedis(t *testing.T) {
	e := newEnv(t)
	e.apply(t, "login_failed", "ip", "198.51.100.1", 6, time.Now())
	denied := decide.Request{Action: "login_failed", Subjects: []decide.Subject{{Kind: "ip", Subject: "198.51.100.1"}, {Kind: "email", Subject: "x@example.com"}}}
	allowed := decide.Request{Action: "login_failed", Subjects: []decide.Subject{{Kind: "ip", Subject: "198.51.100.2"}}}
	before := e.calls.n.Load()
	for i := range 1000 {
		d, err := e.lim.Check(context.Background(), denied)
		if err != nil || d.Allowed || d.Denial.Subject != "198.51.100.1" {
			t.Fatalf("check %d: %+v %v", i, d, err)
		}
		if d, err = e.lim.Check(context.Background(), allowed); err != nil || !d.Allowed {
			t.Fatalf("check %d: %+v %v", i, d, err)
		}
	}
	if got := e.calls.n.Load() - before; got != 0 {
		t.Errorf("%d Redis round trips for 2000 checks, want 0", got)
	}
	// Through HTTP too, with the headers of the denial.
	resp, _ := httpGet(t, checkURL(e, "action", "login_failed", "ip", "198.51.100.1"), nil)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(resp.Header.Get("RateLimit"), `"login-failed/ip/1m";r=0`) {
		t.Errorf("over HTTP: %d %v", resp.StatusCode, resp.Header)
	}
	denied.Exact = true
	if d, err := e.lim.Check(context.Background(), denied); err != nil || d.Allowed {
		t.Fatalf("exact check: %+v %v", d, err)
	}
	if got := e.calls.n.Load() - before; got != 1 {
		t.Errorf("%d Redis round trips for one exact check, want 1", got)
	}
}

// Strict mode: 200 concurrent Takes for one subject admit exactly the
// limit, through the limiter and over Connect; each admitted take is
// published as counted.
func TestStrictTakeAdmitsExactlyTheLimit(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var allowed, counted atomic.Int64
	var wg sync.WaitGroup
	c := floodgatev1connect.NewLimiterClient(h2cClient(), "http://"+e.srv.HTTPAddr(), connect.WithGRPC())
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				d, err := e.lim.Take(ctx, decide.Request{Action: "password_reset", Subjects: []decide.Subject{{Kind: "email", Subject: "a@example.com"}}})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
				if d.Counted {
					counted.Add(1)
				}
				return
			}
			res, err := c.Take(ctx, connect.NewRequest(&floodgatev1.TakeRequest{Action: "password_reset", Subjects: []*floodgatev1.Subject{{Kind: "email", Subject: "a@example.com"}}}))
			if err != nil {
				t.Error(err)
				return
			}
			if res.Msg.Allowed {
				allowed.Add(1)
			}
			if res.Msg.Counted {
				counted.Add(1)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 10 || counted.Load() != 10 {
		t.Fatalf("allowed %d counted %d of 200 takes, want exactly 10", allowed.Load(), counted.Load())
	}
	if n := len(e.counted(t)); n != 10 {
		t.Errorf("%d counted events published, want 10", n)
	}
	// No aggregator runs here: the takes are in Redis, not yet in memory.
	d, err := e.lim.Check(ctx, decide.Request{Action: "password_reset", Exact: true, Subjects: []decide.Subject{{Kind: "email", Subject: "a@example.com"}}})
	if err != nil || d.Allowed || d.Denial.Rule != "password-reset" || d.Limits[0].Count != 10 {
		t.Errorf("check after the takes: %+v %v", d, err)
	}
	// POST /v1/take is denied too.
	resp, err := http.Post("http://"+e.srv.HTTPAddr()+"/v1/take?action=password_reset&email=a@example.com", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 429 {
		t.Errorf("POST /v1/take: %d, want 429", resp.StatusCode)
	}
}

// An allowed take's limits count the take itself: the remaining it reports
// (and RateLimit headers carry) is what is left after it, down to 0 at the
// last one admitted.
func TestTakeReportsWhatIsLeftAfterIt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	req := decide.Request{Action: "password_reset", Subjects: []decide.Subject{{Kind: "email", Subject: "left@example.com"}}}
	for i := int64(1); ; i++ {
		d, err := e.lim.Take(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			if i != 11 {
				t.Fatalf("take %d denied, want the 11th", i)
			}
			return
		}
		var minute *decide.Limit
		for j := range d.Limits {
			if d.Limits[j].Window == time.Minute {
				minute = &d.Limits[j]
			}
		}
		if minute == nil || minute.Count != i || minute.Remaining != minute.Limit-i || minute.ResetAfter <= 0 {
			t.Fatalf("take %d: per-minute limit %+v, want count %d and remaining limit-%d", i, minute, i, i)
		}
	}
}

// hangingListener accepts connections and never answers: a Redis that is
// up but stuck.
func hangingListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

func deadPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// With Redis dead or stuck, lookups answer within the timeout with the
// failure mode, through the limiter and over HTTP.
func TestFailureModeWithinTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr func(*testing.T) string
		mode decide.FailureMode
	}{
		{"dead-open", deadPort, decide.FailOpen},
		{"dead-closed", deadPort, decide.FailClosed},
		{"stuck-open", hangingListener, decide.FailOpen},
		{"stuck-closed", hangingListener, decide.FailClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redisClient(t, tc.addr(t))
			st := testStoreNoCleanup(t, rdb)
			taker, err := strict.New(strict.Config{Store: st, Timeout: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			lim, err := decide.New(decide.Config{Store: st, Taker: taker, Rules: func() *rulesSet { return mustRules(t, testRules) }, FailureMode: tc.mode, Timeout: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := decide.NewServer(decide.ServerConfig{Limiter: lim, HTTPAddr: "127.0.0.1:0", RLSAddr: "off"})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = srv.Shutdown(context.Background()) }()
			for _, take := range []bool{false, true} {
				for range 3 {
					start := time.Now()
					req := decide.Request{Action: "login_failed", Subjects: []decide.Subject{{Kind: "ip", Subject: "192.0.2.9"}}}
					var d decide.Decision
					if take {
						d, err = lim.Take(context.Background(), req)
					} else {
						d, err = lim.Check(context.Background(), req)
					}
					el := time.Since(start)
					if err != nil {
						t.Fatal(err)
					}
					if el > 150*time.Millisecond {
						t.Errorf("answered in %s, timeout 50ms", el)
					}
					if !d.Degraded || d.Allowed != (tc.mode == decide.FailOpen) {
						t.Errorf("take=%v: decision %+v, want degraded and allowed=%v", take, d, tc.mode == decide.FailOpen)
					}
				}
			}
			start := time.Now()
			resp, body := httpGet(t, "http://"+srv.HTTPAddr()+"/v1/check?action=login_failed&ip=192.0.2.9", nil)
			want := http.StatusOK
			if tc.mode == decide.FailClosed {
				want = http.StatusTooManyRequests
			}
			if resp.StatusCode != want || !body.Degraded || time.Since(start) > 200*time.Millisecond {
				t.Errorf("HTTP %d degraded=%v in %s, want %d", resp.StatusCode, body.Degraded, time.Since(start), want)
			}
			// Strict takes fail closed whatever the mode: zero overshoot.
			d, err := lim.Take(context.Background(), decide.Request{Action: "password_reset", Subjects: []decide.Subject{{Kind: "email", Subject: "a@example.com"}}})
			if err != nil || d.Allowed || !d.Degraded {
				t.Errorf("strict take with Redis down: %+v %v, want denied", d, err)
			}
			if rr := httpStatus(t, "http://"+srv.HTTPAddr()+"/readyz"); rr != http.StatusServiceUnavailable {
				t.Errorf("/readyz %d with Redis down, want 503", rr)
			}
		})
	}
}

func httpStatus(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Bad requests get 400 (HTTP), InvalidArgument (Connect, RLS) with a
// message; auth is enforced when configured; health endpoints answer.
func TestBadRequestsAndAuth(t *testing.T) {
	e := newEnv(t, func(_ *decide.Config, s *decide.ServerConfig) { s.AuthToken = "s3cret" })
	auth := map[string]string{"Authorization": "Bearer s3cret"}
	base := "http://" + e.srv.HTTPAddr()
	for _, tc := range []struct {
		query string
		want  int
		msg   string
	}{
		{"ip=1.2.3.4", 400, "action is required"},
		{"action=login_failed", 400, "no subjects"},
		{"action=login_failed&IP=1.2.3.4", 400, "kind"},
		{"action=Login&ip=1.2.3.4", 400, "action"},
		{"action=login_failed&ip=" + strings.Repeat("x", 300), 200, ""}, // decided on its digest
		{"action=login_failed&ip=" + strings.Repeat("x", 9000), 414, "query longer"},
		{"action=a&action=b&ip=1", 400, "action given 2 times"},
		{"action=nothing_here&ip=1.2.3.4", 200, ""},
	} {
		resp, body := httpGet(t, base+"/v1/check?"+tc.query, auth)
		if resp.StatusCode != tc.want || !strings.Contains(body.Error, tc.msg) {
			t.Errorf("%.60s: %d %q, want %d %q", tc.query, resp.StatusCode, body.Error, tc.want, tc.msg)
		}
	}
	many := url.Values{"action": {"login_failed"}}
	for i := range 20 {
		many.Add("ip", "192.0.2."+strconv.Itoa(i))
	}
	if resp, body := httpGet(t, base+"/v1/check?"+many.Encode(), auth); resp.StatusCode != 400 || !strings.Contains(body.Error, "at most 16") {
		t.Errorf("20 subjects: %d %q", resp.StatusCode, body.Error)
	}
	if resp, _ := httpGet(t, base+"/v1/check?action=login_failed&ip=1.2.3.4", nil); resp.StatusCode != 401 {
		t.Errorf("no token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := httpGet(t, base+"/v1/check?action=login_failed&ip=1.2.3.4", map[string]string{"Authorization": "Bearer nope"}); resp.StatusCode != 401 {
		t.Errorf("wrong token: %d, want 401", resp.StatusCode)
	}
	if s := httpStatus(t, base+"/healthz"); s != 200 {
		t.Errorf("/healthz %d", s)
	}
	if s := httpStatus(t, base+"/readyz"); s != 200 {
		t.Errorf("/readyz %d", s)
	}

	ctx := context.Background()
	c := floodgatev1connect.NewLimiterClient(h2cClient(), base, connect.WithGRPC())
	_, err := c.Check(ctx, connect.NewRequest(&floodgatev1.CheckRequest{Action: "login_failed", Subjects: []*floodgatev1.Subject{{Kind: "ip", Subject: "1"}}}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("connect without token: %v", err)
	}
	req := connect.NewRequest(&floodgatev1.CheckRequest{Action: "login_failed", Subjects: []*floodgatev1.Subject{{Kind: "IP", Subject: "1"}}})
	req.Header().Set("Authorization", "Bearer s3cret")
	_, err = c.Check(ctx, req)
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("connect bad kind: %v", err)
	}

	rls := rlsClient(t, e.srv.RLSAddr())
	_, err = rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "login_failed", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("ip", "1.2.3.4")}})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("rls without token: %v", err)
	}
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
	_, err = rls.ShouldRateLimit(actx, &rlsv3.RateLimitRequest{Domain: "login_failed", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("X-Forwarded-For", "1.2.3.4")}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("rls bad key: %v", err)
	}
	rr, err := rls.ShouldRateLimit(actx, &rlsv3.RateLimitRequest{Domain: "login_failed", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("ip", "1.2.3.4")}})
	if err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("rls with token: %v %v", rr, err)
	}
	var lerr *decide.Error
	_, err = e.lim.Check(ctx, decide.Request{Action: "login_failed"})
	if !errors.As(err, &lerr) || lerr.Code != decide.CodeInvalid {
		t.Errorf("no subjects: %v", err)
	}
}

// A subject named twice in one request (ip=a&ip=a, query plus body, repeated
// Envoy descriptor entries) is one subject: a strict take admits exactly the
// limit, and every take publishes one event per distinct subject.
func TestDuplicateSubjectsDecidedOnce(t *testing.T) {
	e := newEnv(t, func(_ *decide.Config, s *decide.ServerConfig) { s.RLSMode = decide.RLSTake })
	ctx := context.Background()
	dup := []decide.Subject{{Kind: "email", Subject: "dup@example.com"}, {Kind: "email", Subject: "dup@example.com"}}
	admitted := 0
	for range 20 {
		d, err := e.lim.Take(ctx, decide.Request{Action: "password_reset", Subjects: dup})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	d, err := e.lim.Check(ctx, decide.Request{Action: "password_reset", Exact: true, Subjects: dup[:1]})
	if err != nil {
		t.Fatal(err)
	}
	counted := len(e.counted(t))
	if admitted != 10 || d.Limits[0].Count != 10 || counted != 10 {
		t.Fatalf("strict 10/1m: admitted %d, Redis sum %d, counted events published %d; want 10 each", admitted, d.Limits[0].Count, counted)
	}

	// Non-strict take: one uncounted event for the aggregator, not two.
	if _, err := e.lim.Take(ctx, decide.Request{Action: "login_failed", Subjects: []decide.Subject{{Kind: "ip", Subject: "192.0.2.9"}, {Kind: "ip", Subject: "192.0.2.9"}}}); err != nil {
		t.Fatal(err)
	}
	e.pub.mu.Lock()
	plain := len(e.pub.plain)
	e.pub.mu.Unlock()
	if plain != 1 {
		t.Errorf("non-strict take with the ip twice published %d events, want 1", plain)
	}

	// HTTP ip=a&ip=a: one event.
	resp, err := http.Post("http://"+e.srv.HTTPAddr()+"/v1/take?action=login_failed&ip=192.0.2.10&ip=192.0.2.10", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	e.pub.mu.Lock()
	plain = len(e.pub.plain)
	e.pub.mu.Unlock()
	if resp.StatusCode != 200 || plain != 2 {
		t.Errorf("POST /v1/take ip=a&ip=a: %d, %d events published in all; want 200 and 2", resp.StatusCode, plain)
	}

	// Envoy RLS take mode, the same entry in two descriptors: each
	// descriptor gets the (same) answer, the subject is counted once.
	rls := rlsClient(t, e.srv.RLSAddr())
	req := &rlsv3.RateLimitRequest{Domain: "password_reset", Descriptors: []*commonv3.RateLimitDescriptor{
		descriptor("email", "rls@example.com"), descriptor("email", "rls@example.com")}}
	for i := range 11 {
		rr, err := rls.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		want := rlsv3.RateLimitResponse_OK
		if i == 10 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if rr.OverallCode != want || len(rr.Statuses) != 2 || rr.Statuses[0].Code != want || rr.Statuses[1].Code != want {
			t.Fatalf("RLS take %d: %v, want %v for both descriptors", i+1, rr, want)
		}
	}
}

// Take(n) with n over an enforced limit's count can never be admitted: a
// bad request (InvalidArgument over RLS), not a denial with a retry time —
// unless the subject is denied anyway.
func TestTakeMoreThanTheLimitIsInvalid(t *testing.T) {
	e := newEnv(t, func(_ *decide.Config, s *decide.ServerConfig) { s.RLSMode = decide.RLSTake })
	ctx := context.Background()
	req := decide.Request{Action: "password_reset", Subjects: []decide.Subject{{Kind: "email", Subject: "n@example.com"}}, N: 11}
	_, err := e.lim.Take(ctx, req)
	if decide.ErrorCode(err) != decide.CodeInvalid || !strings.Contains(err.Error(), "n=11 exceeds the limit 10/1m of rule password-reset") {
		t.Fatalf("take n=11 of 10/1m: %v, want an invalid-request error", err)
	}
	// Check ignores n; n up to the limit is a take like any other.
	if d, err := e.lim.Check(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("check: %+v %v", d, err)
	}
	req.N = 10
	if d, err := e.lim.Take(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("take n=10 of 10/1m: %+v %v", d, err)
	}
	// A shadow or allowlisting rule does not limit n.
	if _, err := e.lim.Take(ctx, decide.Request{Action: "visit", Subjects: []decide.Subject{{Kind: "ip", Subject: "192.0.2.1"}}, N: 4}); err != nil {
		t.Fatalf("take n=4 under a shadow 3/1m: %v", err)
	}
	_, err = rlsClient(t, e.srv.RLSAddr()).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "password_reset", HitsAddend: 11,
		Descriptors: []*commonv3.RateLimitDescriptor{descriptor("email", "n2@example.com")}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("RLS take hits_addend=11: %v, want InvalidArgument", err)
	}
	// A subject denied anyway is denied, not refused: a refusal is a pass
	// to Envoy's default failure_mode_deny: false.
	rr, err := rlsClient(t, e.srv.RLSAddr()).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "password_reset", HitsAddend: 11,
		Descriptors: []*commonv3.RateLimitDescriptor{descriptor("email", "n@example.com")}})
	if err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("RLS take hits_addend=11 of a full 10/1m: %v %v, want OVER_LIMIT", rr, err)
	}
}

// writeDeny stores a deny record for a subject as the aggregator would.
func writeDeny(t *testing.T, e *env, kind, subject string, until time.Time) {
	t.Helper()
	d := window.Deny{Rule: "login-failed", Limit: rules.Limit{Count: 10, Window: time.Hour}, Count: 11, Until: until}
	js, err := d.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	sub := window.Subject{Action: "login_failed", Kind: kind, Subject: subject}
	key := e.store.Keys().Deny(window.Partition(sub, testPartitions), sub)
	if err := e.rdb.Set(context.Background(), key, js, time.Until(until)).Err(); err != nil {
		t.Fatal(err)
	}
}

// An exact check reads deny records, across slots, and reports the denial
// with the longest retry of its subjects; a record of a rule that is gone
// does not deny.
func TestExactCheckReadsDenyRecords(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	start := time.Now()
	writeDeny(t, e, "ip", "198.51.100.7", start.Add(20*time.Minute))
	writeDeny(t, e, "email", "ttl@example.com", start.Add(40*time.Minute))
	req := decide.Request{Action: "login_failed", Exact: true, Subjects: []decide.Subject{{Kind: "ip", Subject: "198.51.100.7"}, {Kind: "email", Subject: "ttl@example.com"}}}
	d, err := e.lim.Check(ctx, req)
	if err != nil || d.Allowed || d.Denial.Kind != "email" || d.RetryAfter() <= 30*time.Minute {
		t.Fatalf("exact check: %+v %v, want the e-mail's 40m denial", d, err)
	}
	e.set = mustRules(t, strings.Replace(testRules, "name: login-failed", "name: login-failed-v2", 1))
	if d, err = e.lim.Check(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("records of a rule that is gone: %+v %v, want allowed", d, err)
	}
}
