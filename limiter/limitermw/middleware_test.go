package limitermw_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
	"github.com/floodgate-dev/floodgate/limiter/limiterclient"
	"github.com/floodgate-dev/floodgate/limiter/limitermw"
	"github.com/floodgate-dev/floodgate/producer"
)

const testRules = `rules:
  - name: create
    action: link_create
    kinds: [ip]
    limits: [3/m]
    strict: true
    message: Slow down.
  - name: visit
    action: visit
    kinds: [ip]
    limits: [100/m]
`

// env is a limiter of the test's own: its own rules, Redis prefix and
// one-partition topic (so the events read back come in publish order).
type env struct {
	brokers []string
	topic   string
	client  *limiterclient.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	brokers := stacktest.Brokers(t)
	rdb := stacktest.Redis(t)
	e := &env{brokers: brokers, topic: stacktest.Topic(t, brokers, 1)}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	st := servicetest.Stack{Brokers: brokers, RedisAddr: stacktest.RedisAddr(), Topic: e.topic, Prefix: stacktest.Prefix(t, rdb), Rules: rules}
	bin := servicetest.Build(t, servicetest.Floodgate)
	lim := servicetest.Limiter(t, bin, st)
	// The partition's owner publishes the strict takes' events, which the
	// take script queues in Redis with the count.
	servicetest.Aggregator(t, bin, st, "--no-history")
	c, err := limiterclient.New(limiterclient.Config{BaseURL: lim.URL, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.client = c
	return e
}

// read returns the topic's first n messages, failing after 30s.
func (e *env) read(t *testing.T, n int) []kafka.Message {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: e.topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []kafka.Message
	for len(out) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read %s: %d of %d messages: %v", e.topic, len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

// fromHeader takes the client IP from X-Test-IP, as a proxy's header.
func fromHeader(r *http.Request) []limitapi.Subject {
	return []limitapi.Subject{{Kind: "ip", Subject: r.Header.Get("X-Test-IP")}}
}

func do(t *testing.T, method, url, ip string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	req.Header.Set("X-Test-IP", ip)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// Take mode: strict rules admit exactly their limit, one event per admitted
// request reaches the topic (queued with the count, published by the
// partition's owner), and a denial publishes nothing.
func TestTakeCountsAndPublishesOnce(t *testing.T) {
	e := newEnv(t)
	mw, err := limitermw.New(limitermw.Config{Checker: e.client, Take: true, Action: "link_create", Subjects: fromHeader, FailClosed: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()

	for i := 1; i <= 3; i++ {
		if resp := do(t, "POST", srv.URL, "192.0.2.1"); resp.StatusCode != http.StatusCreated {
			t.Fatalf("take %d: %d, want 201", i, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest("POST", srv.URL, nil)
	req.Header.Set("X-Test-IP", "192.0.2.1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body limitapi.CheckResult
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || retry < 1 || retry > 60 || body.Rule != "create" || body.Message != "Slow down." {
		t.Fatalf("4th take: %d Retry-After %q body %+v; want 429, 1..60 s, rule create", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// Another IP is admitted; its event comes right after the first three
	// (one partition, one producer): the denial published nothing.
	if resp := do(t, "POST", srv.URL, "192.0.2.2"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("other ip: %d, want 201", resp.StatusCode)
	}
	msgs := e.read(t, 4)
	for i, m := range msgs {
		want := "ip:192.0.2.1"
		if i == 3 {
			want = "ip:192.0.2.2"
		}
		hs := map[string]string{}
		for _, h := range m.Headers {
			hs[h.Key] = string(h.Value)
		}
		if string(m.Key) != want || hs[event.HeaderCounted] != "1" || hs[event.HeaderTake] == "" {
			t.Errorf("message %d: key %s headers %v; want %s with %s and %s", i, m.Key, m.Headers, want, event.HeaderCounted, event.HeaderTake)
		}
	}
}

// Check mode: the middleware publishes after the handler, only when
// Publish says so, one event per subject with the others as attrs.
func TestCheckPublishesAfterHandler(t *testing.T) {
	e := newEnv(t)
	pub, err := producer.New(producer.Config{Brokers: e.brokers, Topic: e.topic})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	mw, err := limitermw.New(limitermw.Config{
		Checker: e.client, Action: "visit", Publisher: pub,
		Subjects: func(r *http.Request) []limitapi.Subject {
			return []limitapi.Subject{{Kind: "link", Subject: strings.TrimPrefix(r.URL.Path, "/")}, {Kind: "ip", Subject: r.Header.Get("X-Test-IP")}}
		},
		Publish: func(r *http.Request, status int) bool { return status == http.StatusFound },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/abc" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Location", "https://example.com/")
		w.WriteHeader(http.StatusFound)
	})))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/nope", "/abc"} {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("X-Test-IP", "192.0.2.7")
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("RateLimit-Policy") == "" {
			t.Errorf("%s: no RateLimit-Policy on an allowed response", path)
		}
	}
	got := map[string]map[string]string{}
	for _, m := range e.read(t, 2) {
		ev, err := event.Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		got[ev.Key()] = ev.Attrs
	}
	if got["link:abc"]["ip"] != "192.0.2.7" || got["ip:192.0.2.7"]["link"] != "abc" || len(got) != 2 {
		t.Errorf("published %v; want link:abc with ip attr and ip:192.0.2.7 with link attr (and nothing for the 404)", got)
	}
}

// An unreachable limiter: through by default, 503 with FailClosed.
func TestUnreachableLimiter(t *testing.T) {
	c, err := limiterclient.New(limiterclient.Config{BaseURL: "http://" + servicetest.FreeAddr(t), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		closed, take bool
		want         int
	}{{false, false, 200}, {true, false, 503}, {true, true, 503}, {false, true, 200}} {
		mw, err := limitermw.New(limitermw.Config{Checker: c, Action: "visit", FailClosed: tc.closed, Take: tc.take})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != tc.want {
			t.Errorf("fail closed %v take %v: %d, want %d", tc.closed, tc.take, rec.Code, tc.want)
		}
	}
}

type checkOnly struct{}

func (checkOnly) Check(context.Context, limitapi.Request) (limitapi.Decision, error) {
	return limitapi.Decision{Allowed: true}, nil
}

func TestConfigValidate(t *testing.T) {
	c, err := limiterclient.New(limiterclient.Config{BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := producer.New(producer.Config{Brokers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  limitermw.Config
		want string
	}{
		{limitermw.Config{Action: "a"}, "nil checker"},
		{limitermw.Config{Checker: c}, "no action"},
		{limitermw.Config{Checker: c, Action: "a", Take: true, Publisher: pub}, "twice"},
		{limitermw.Config{Checker: checkOnly{}, Action: "a", Take: true}, "Taker"},
		{limitermw.Config{Checker: c, Action: "a", Take: true}, ""},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestEventsCarryOtherKindsAsAttrs(t *testing.T) {
	ts := time.Unix(1_800_000_000, 0)
	evs := limitermw.Events("login_failed", ts, []limitapi.Subject{{Kind: "ip", Subject: "a"}, {Kind: "email", Subject: "x@y"}, {Kind: "ip", Subject: "b"}})
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3", len(evs))
	}
	for _, e := range evs {
		if err := e.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if evs[0].Attrs["email"] != "x@y" || len(evs[0].Attrs) != 1 || evs[1].Attrs["ip"] != "a" || evs[2].Attrs["email"] != "x@y" {
		t.Errorf("attrs %v %v %v", evs[0].Attrs, evs[1].Attrs, evs[2].Attrs)
	}
}

// A request the limiter refuses as invalid (here a kind that is no kind) is
// answered 400 and never reaches the handler, though FailClosed is false:
// that default is for a limiter that cannot be reached, not for requests
// an attacker can make invalid. A subject over its limit beside the bad
// part is denied 429; an overlong subject is no bad part (its digest is
// decided).
func TestRefusedRequestIsNotAPass(t *testing.T) {
	e := newEnv(t)
	handled := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled++
		w.WriteHeader(http.StatusCreated)
	})
	subjects := func(r *http.Request) []limitapi.Subject {
		subs := fromHeader(r)
		if v := r.Header.Get("X-Test-Extra"); v != "" {
			kind, subject, _ := strings.Cut(v, "=")
			subs = append(subs, limitapi.Subject{Kind: kind, Subject: subject})
		}
		return subs
	}
	take, err := limitermw.New(limitermw.Config{Checker: e.client, Take: true, Action: "link_create", Subjects: subjects})
	if err != nil {
		t.Fatal(err)
	}
	check, err := limitermw.New(limitermw.Config{Checker: e.client, Action: "link_create", Subjects: subjects})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(mw func(http.Handler) http.Handler, ip, extra string) int {
		req := httptest.NewRequest("POST", "/links", nil)
		req.Header.Set("X-Test-IP", ip)
		if extra != "" {
			req.Header.Set("X-Test-Extra", extra)
		}
		rec := httptest.NewRecorder()
		mw(h).ServeHTTP(rec, req)
		return rec.Code
	}
	for name, mw := range map[string]func(http.Handler) http.Handler{"take": take, "check": check} {
		if code := serve(mw, "192.0.2.50", "E-Mail=x@example.com"); code != http.StatusBadRequest || handled != 0 {
			t.Fatalf("%s with a bad kind: %d, handler ran %d times; want 400 and not run", name, code, handled)
		}
	}
	long := "email=" + strings.Repeat("x", 300) + "@example.com"
	for i := 1; i <= 3; i++ {
		if code := serve(take, "192.0.2.51", long); code != http.StatusCreated {
			t.Fatalf("take %d with an overlong e-mail: %d, want 201", i, code)
		}
	}
	// (A check answers from memory, which has strict counts once an
	// aggregator counts the takes' events: this limiter has none.)
	if code := serve(take, "192.0.2.51", "E-Mail=x@example.com"); code != http.StatusTooManyRequests {
		t.Errorf("take, ip over its limit and a bad kind: %d, want 429", code)
	}
	if handled != 3 {
		t.Errorf("handler ran %d times, want 3", handled)
	}
}
