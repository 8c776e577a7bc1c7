package decide_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/segmentio/kafka-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/strict"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
	"github.com/floodgate-dev/floodgate/producer"
)

// resetRules: one password reset a minute per IP, two per e-mail, both
// strict.
const resetRules = `
rules:
  - name: reset-ip
    action: password_reset
    kinds: [ip]
    limits: [1/1m]
    strict: true
    message: One reset a minute.
  - name: reset-email
    action: password_reset
    kinds: [email]
    limits: [2/1m]
    strict: true
`

// postTake posts a take with its parameters in the form body.
func postTake(t *testing.T, e *env, params url.Values) (int, limitapi.CheckResult) {
	t.Helper()
	resp, err := http.PostForm("http://"+e.srv.HTTPAddr()+"/v1/take", params)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body limitapi.CheckResult
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// An IP over a strict 1/m limit that sends a 300-byte e-mail, or one with a
// TAB, is denied (HTTP 429, RLS OVER_LIMIT) instead of refused — a refusal
// is a pass to Envoy's default and to a fail-open middleware — and the
// overlong e-mail is itself counted and limited under its digest.
func TestOverlongSubjectDoesNotHideADenial(t *testing.T) {
	e := newEnv(t, func(_ *decide.Config, s *decide.ServerConfig) { s.RLSMode = decide.RLSTake })
	e.set = mustRules(t, resetRules)
	ctx := context.Background()
	const ip = "198.51.100.31"
	long := strings.Repeat("a", 300) + "@example.com"
	tab := "victim@example.com\t"
	if d, err := e.lim.Take(ctx, decide.Request{Action: "password_reset", Subjects: []decide.Subject{{Kind: "ip", Subject: ip}, {Kind: "email", Subject: "first@example.com"}}}); err != nil || !d.Allowed {
		t.Fatalf("first reset: %+v %v", d, err)
	}
	rls := rlsClient(t, e.srv.RLSAddr())
	for _, email := range []string{long, tab} {
		code, body := postTake(t, e, url.Values{"action": {"password_reset"}, "ip": {ip}, "email": {email}})
		if code != http.StatusTooManyRequests || body.Rule != "reset-ip" {
			t.Errorf("HTTP take, ip over its limit, email %.20q...: %d %+v, want 429 by reset-ip", email, code, body)
		}
		rr, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "password_reset", Descriptors: []*commonv3.RateLimitDescriptor{
			descriptor("ip", ip), descriptor("email", email)}})
		if err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || rr.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("RLS take, ip over its limit, email %.20q...: %v %v, want OVER_LIMIT", email, rr, err)
		}
	}
	// Denied takes counted nothing.
	d, err := e.lim.Check(ctx, decide.Request{Action: "password_reset", Exact: true, Subjects: []decide.Subject{{Kind: "email", Subject: long}}})
	if err != nil || len(d.Limits) != 1 || d.Limits[0].Count != 0 {
		t.Fatalf("overlong e-mail after denied takes: %+v %v, want count 0", d.Limits, err)
	}

	// From other IPs the overlong e-mail is taken, counted and published
	// under its digest, and denied at its own limit (2/1m).
	digest := event.CanonicalSubject(long)
	for i, from := range []string{"198.51.100.32", "198.51.100.33", "198.51.100.34"} {
		code, body := postTake(t, e, url.Values{"action": {"password_reset"}, "ip": {from}, "email": {long}})
		if i < 2 && code != http.StatusOK {
			t.Fatalf("take %d of the overlong e-mail: %d %+v, want 200", i+1, code, body)
		}
		if i == 2 && (code != http.StatusTooManyRequests || body.Rule != "reset-email" || body.Subject != digest) {
			t.Fatalf("third take of the overlong e-mail: %d %+v, want 429 by reset-email on %s", code, body, digest)
		}
	}
	for _, s := range []string{long, digest} {
		d, err := e.lim.Check(ctx, decide.Request{Action: "password_reset", Exact: true, Subjects: []decide.Subject{{Kind: "email", Subject: s}}})
		if err != nil || len(d.Limits) != 1 || d.Limits[0].Count != 2 || d.Limits[0].Subject != digest {
			t.Errorf("exact check of %.20q...: %+v %v, want count 2 of %s", s, d.Limits, err, digest)
		}
	}
	n := 0
	for _, ev := range e.counted(t) {
		if ev.Kind == "email" && ev.Subject == digest {
			n++
			if _, err := event.Encode(ev); err != nil || ev.Key() != "email:"+digest {
				t.Errorf("published %+v: key %q, %v", ev, ev.Key(), err)
			}
		}
		if ev.Kind == "ip" && ev.Attrs["email"] != "" && !strings.HasPrefix(ev.Attrs["email"], event.DigestPrefix) && len(ev.Attrs["email"]) > event.MaxSubjectLen {
			t.Errorf("published attrs %v carry the overlong e-mail", ev.Attrs)
		}
	}
	if n != 2 {
		t.Errorf("%d counted events of %s published, want 2", n, digest)
	}
}

// A request part that is invalid for real (a kind that is no kind, too many
// subjects, a bad event id) is refused only when none of the valid subjects
// is denied: a denial wins, on every surface.
func TestInvalidPartRefusedUnlessDenied(t *testing.T) {
	e := newEnv(t, func(_ *decide.Config, s *decide.ServerConfig) { s.RLSMode = decide.RLSTake })
	e.set = mustRules(t, resetRules)
	ctx := context.Background()
	const over, fresh = "198.51.100.41", "198.51.100.42"
	if d, err := e.lim.Take(ctx, decide.Request{Action: "password_reset", Subjects: []decide.Subject{{Kind: "ip", Subject: over}}}); err != nil || !d.Allowed {
		t.Fatalf("first reset: %+v %v", d, err)
	}
	for _, tc := range []struct {
		ip   string
		want int
	}{{over, http.StatusTooManyRequests}, {fresh, http.StatusBadRequest}} {
		code, body := postTake(t, e, url.Values{"action": {"password_reset"}, "ip": {tc.ip}, "E-Mail": {"x@example.com"}})
		if code != tc.want {
			t.Errorf("HTTP take ip %s with a bad kind: %d %+v, want %d", tc.ip, code, body, tc.want)
		}
	}
	rls := rlsClient(t, e.srv.RLSAddr())
	rr, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "password_reset", Descriptors: []*commonv3.RateLimitDescriptor{
		descriptor("ip", over), descriptor("X-Forwarded-For", "x")}})
	if err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("RLS, ip over its limit and a bad key: %v %v, want OVER_LIMIT", rr, err)
	}
	_, err = rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "password_reset", Descriptors: []*commonv3.RateLimitDescriptor{
		descriptor("ip", fresh), descriptor("X-Forwarded-For", "x")}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("RLS, fresh ip and a bad key: %v, want InvalidArgument", err)
	}
	many := []decide.Subject{{Kind: "ip", Subject: over}}
	for i := range 20 {
		many = append(many, decide.Subject{Kind: "ip", Subject: "192.0.2." + strconv.Itoa(i)})
	}
	for _, req := range []decide.Request{
		{Action: "password_reset", Subjects: many},
		{Action: "password_reset", Subjects: many[:1], ID: "bad id"},
		{Action: "password_reset", Subjects: many[:1], N: event.MaxN + 1},
	} {
		if d, err := e.lim.Take(ctx, req); err != nil || d.Allowed || d.Denial.Rule != "reset-ip" {
			t.Errorf("take %d subjects id %q n %d with the ip over its limit: %+v %v, want denied by reset-ip", len(req.Subjects), req.ID, req.N, d, err)
		}
		req.Subjects = req.Subjects[1:]
		if len(req.Subjects) == 0 {
			req.Subjects = []decide.Subject{{Kind: "ip", Subject: fresh}}
		}
		_, err := e.lim.Take(ctx, req)
		if decide.ErrorCode(err) != decide.CodeInvalid || !errors.Is(err, limitapi.ErrRefused) {
			t.Errorf("take %d subjects id %q n %d, nothing denied: %v, want a refusal matching ErrRefused", len(req.Subjects), req.ID, req.N, err)
		}
	}
	counted := e.counted(t)
	e.pub.mu.Lock()
	defer e.pub.mu.Unlock()
	if len(counted) != 1 || len(e.pub.plain) != 0 {
		t.Errorf("published %d counted and %d other events, want the first reset only", len(counted), len(e.pub.plain))
	}
}

// An application that publishes a failed login with a 300-byte e-mail (or
// a producer of its own that writes one with a TAB, keyed by it) has it
// accepted on the Kafka path — not dead-lettered — and counted under the
// digest, which the limiter then denies.
func TestKafkaPathCountsOverlongSubjects(t *testing.T) {
	e := newEnv(t)
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub, err := producer.New(producer.Config{Brokers: bs, Topic: topic, BatchTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pub.Close(); err != nil {
			t.Error(err)
		}
	}()
	long := strings.Repeat("b", 300) + "@example.com"
	tab := "victim@example.com\t"
	now := time.Now()
	var evs []event.Event
	for range 6 {
		evs = append(evs, event.Event{ID: event.NewID(), Action: "login_failed", Kind: "email", Subject: long, TS: now, Attrs: map[string]string{"ip": "203.0.113.50"}})
	}
	if err := pub.Publish(ctx, evs...); err != nil {
		t.Fatalf("publish overlong e-mails: %v", err)
	}
	raw := `{"v":1,"id":"raw1","action":"login_failed","kind":"email","subject":"victim@example.com\t","ts":` + strconv.FormatInt(now.UnixMilli(), 10) + `}`
	w := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: topic, RequiredAcks: kafka.RequireAll}
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("email:" + tab), Value: []byte(raw)}); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: bs, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer func() { _ = r.Close() }()
	var accepted []event.Event
	for range 7 {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ev, aerr := consume.Accept(&m, time.Now(), time.Minute)
		if aerr != nil {
			t.Fatalf("message %d key %.30q: refused (%s), would be dead-lettered", m.Offset, m.Key, aerr)
		}
		accepted = append(accepted, ev)
	}
	for i, ev := range accepted {
		want := event.CanonicalSubject(long)
		if i == 6 {
			want = event.CanonicalSubject(tab)
		}
		if ev.Subject != want {
			t.Fatalf("accepted event %d subject %q, want %q", i, ev.Subject, want)
		}
	}
	// Counted as the aggregator counts (each subject in its slot).
	for _, ev := range accepted {
		sub := window.Subject{Action: ev.Action, Kind: ev.Kind, Subject: ev.Subject}
		e.applyTo(t, window.Partition(sub, testPartitions), []event.Event{ev}, now)
	}
	resp, body := httpGet(t, checkURL(e, "action", "login_failed", "email", long), nil)
	if resp.StatusCode != http.StatusTooManyRequests || body.Subject != event.CanonicalSubject(long) {
		t.Errorf("check of the overlong e-mail after 6 failed logins: %d %+v, want 429 on its digest", resp.StatusCode, body)
	}
	// The producer's TAB e-mail is counted under the digest of its bytes,
	// which the limiter looks up as given. Named with its TAB, it is the
	// e-mail trimmed (kind email's normalization, which the limiter applies
	// before a digest): the subject such a producer should have published.
	d, err := e.lim.Check(ctx, decide.Request{Action: "login_failed", Exact: true, Subjects: []decide.Subject{{Kind: "email", Subject: event.CanonicalSubject(tab)}}})
	if err != nil || len(d.Limits) == 0 || d.Limits[0].Count != 1 {
		t.Errorf("exact check of the digest of the e-mail with a TAB: %+v %v, want count 1", d.Limits, err)
	}
	d, err = e.lim.Check(ctx, decide.Request{Action: "login_failed", Exact: true, Subjects: []decide.Subject{{Kind: "email", Subject: tab}}})
	if err != nil || len(d.Limits) == 0 || d.Limits[0].Subject != "victim@example.com" {
		t.Errorf("exact check of the e-mail with a TAB: %+v %v, want victim@example.com", d.Limits, err)
	}
}

// With Redis failing (a dead address, a stuck one), exact checks and
// non-strict takes still deny what the limiter's memory holds — an
// operator's ban, a subject over its limit — in open failure mode too, so
// Floodgate-Exact cannot push a banned client past its ban; only the rest
// is answered by the failure mode.
func TestDegradedAnswersHoldBansAndDenials(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now()
	const over, banned, fresh = "198.51.100.61", "198.51.100.62", "198.51.100.63"
	e.apply(t, "login_failed", "ip", over, 6, now) // over 5/1m
	sub := window.Subject{Action: "login_failed", Kind: "ip", Subject: banned}
	res, err := writerOf(t, e.store).Admin(ctx, now, operator.AdminRequest{Op: operator.OpBan, Subject: sub, Operator: "alice", Until: now.Add(time.Hour), Message: "ticket 9"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the state to apply the ban", func() bool { return e.state.Seq(res.Partition) >= res.Seq })

	for _, tc := range []struct {
		name string
		addr func(*testing.T) string
	}{{"dead", deadPort}, {"stuck", hangingListener}} {
		t.Run(tc.name, func(t *testing.T) {
			st := testStoreNoCleanup(t, redisClient(t, tc.addr(t)))
			taker, err := strict.New(strict.Config{Store: st, Timeout: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			lim, err := decide.New(decide.Config{Store: st, Taker: taker, State: e.state, Partitions: func() int { return testPartitions },
				Rules: func() *rulesSet { return e.set }, Publisher: e.pub, FailureMode: decide.FailOpen, Timeout: 50 * time.Millisecond})
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
			req := func(ip string, exact bool) decide.Request {
				return decide.Request{Action: "login_failed", Exact: exact, Subjects: []decide.Subject{{Kind: "ip", Subject: ip}}}
			}
			for _, op := range []string{"exact check", "take"} {
				run := func(r decide.Request) (decide.Decision, error) { return lim.Check(ctx, r) }
				if op == "take" {
					run = func(r decide.Request) (decide.Decision, error) { return lim.Take(ctx, r) }
				}
				if d, err := run(req(over, true)); err != nil || d.Allowed || !d.Degraded || d.Denial.Rule != "login-failed" {
					t.Errorf("%s of a subject over its limit: %+v %v, want denied by login-failed", op, d, err)
				}
				if d, err := run(req(banned, true)); err != nil || d.Allowed || !d.Degraded || !d.Denial.Banned || d.Denial.Message != "ticket 9" {
					t.Errorf("%s of a banned subject: %+v %v, want the ban", op, d, err)
				}
				if d, err := run(req(fresh, true)); err != nil || !d.Allowed || !d.Degraded {
					t.Errorf("%s of a fresh subject: %+v %v, want the open failure mode", op, d, err)
				}
			}
			for _, ip := range []string{over, banned} {
				resp, body := httpGet(t, "http://"+srv.HTTPAddr()+"/v1/check?action=login_failed&ip="+ip, map[string]string{limitapi.HeaderExact: "1"})
				if resp.StatusCode != http.StatusTooManyRequests || !body.Degraded {
					t.Errorf("HTTP exact check of %s with Redis down: %d %+v, want 429", ip, resp.StatusCode, body)
				}
			}
		})
	}
}
