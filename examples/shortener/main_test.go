package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
)

const testRules = `rules:
  - name: link-create
    action: link_create
    kinds: [ip]
    limits: [3/m]
    strict: true
    message: Too many new links.
  - name: link-visit
    action: visit
    kinds: [ip]
    limits: [5/m]
    message: Too many visits.
`

// stack is what one test runs: a limiter and a shortener of its own (own
// rules, Redis prefix, one-partition topic, PostgreSQL schema).
type stack struct {
	st        servicetest.Stack
	limiter   *servicetest.Service
	shortener string // base URL
}

func newStack(t *testing.T, cli CLI) *stack {
	t.Helper()
	brokers := stacktest.Brokers(t)
	rdb := stacktest.Redis(t)
	pgURL := stacktest.PostgresURL(t)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &stack{st: servicetest.Stack{
		Brokers: brokers, RedisAddr: stacktest.RedisAddr(), PostgresURL: pgURL, Topic: stacktest.Topic(t, brokers, 1),
		Prefix: stacktest.Prefix(t, rdb), Rules: rules,
	}}
	bin := servicetest.Build(t, servicetest.Floodgate)
	s.limiter = servicetest.Limiter(t, bin, s.st)
	// The partition's owner publishes the strict takes' events, which the
	// take script queues in Redis with the count.
	servicetest.Aggregator(t, bin, s.st, "--no-history")

	var b [4]byte
	_, _ = rand.Read(b[:])
	cli.Schema = "fgtest_shortener_" + hex.EncodeToString(b[:])
	t.Cleanup(func() { dropSchema(t, pgURL, cli.Schema) })
	cli.Addr = servicetest.FreeAddr(t)
	cli.PostgresURL, cli.Brokers, cli.Topic, cli.LimiterURL = pgURL, brokers, s.st.Topic, s.limiter.URL
	s.shortener = startShortener(t, cli)
	return s
}

// startShortener runs the program in-process, as main does, until the test
// ends.
func startShortener(t *testing.T, cli CLI) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cli, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("shortener: %v", err)
		}
	})
	base := "http://" + cli.Addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case err := <-done:
			t.Fatalf("shortener exited: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("shortener at %s not ready: %v", base, err)
		}
	}
}

func dropSchema(t *testing.T, pgURL, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Logf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		t.Logf("drop schema %s: %v", schema, err)
	}
}

var noRedirect = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func send(t *testing.T, method, u, contentType, body string, header map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

func createLink(t *testing.T, base, long, ip string) answer {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"url": long})
	return send(t, "POST", base+"/links", "application/json", string(b), map[string]string{"X-Forwarded-For": ip})
}

// readEvents returns the topic's first n events.
func readEvents(t *testing.T, st servicetest.Stack, n int) []event.Event {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: st.Brokers, Topic: st.Topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []event.Event
	for len(out) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read %s: %d of %d events: %v", st.Topic, len(out), n, err)
		}
		e, err := event.Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func TestLinksAndVisits(t *testing.T) {
	s := newStack(t, CLI{TrustedProxies: []string{"127.0.0.1/32"}})
	long := "https://example.com/a/long/path?q=1"

	a := createLink(t, s.shortener, long, "192.0.2.10")
	code, _ := a.body["code"].(string)
	if a.status != http.StatusCreated || len(code) != 7 || a.body["short_url"] != s.shortener+"/"+code || a.header.Get("Location") != s.shortener+"/"+code {
		t.Fatalf("create: %d %s", a.status, a.raw)
	}
	// The same URL keeps its code; a form body works too.
	again := send(t, "POST", s.shortener+"/links", "application/x-www-form-urlencoded", url.Values{"url": {long}}.Encode(), map[string]string{"X-Forwarded-For": "192.0.2.11"})
	if again.status != http.StatusOK || again.body["code"] != code {
		t.Fatalf("create again: %d %s; want 200 and code %s", again.status, again.raw, code)
	}

	v := send(t, "GET", s.shortener+"/"+code, "", "", map[string]string{"X-Forwarded-For": "198.51.100.7"})
	if v.status != http.StatusFound || v.header.Get("Location") != long {
		t.Fatalf("visit: %d Location %q", v.status, v.header.Get("Location"))
	}
	if nf := send(t, "GET", s.shortener+"/Nope123", "", "", nil); nf.status != http.StatusNotFound || !strings.Contains(nf.body["error"].(string), "Nope123") {
		t.Errorf("unknown code: %d %s", nf.status, nf.raw)
	}
	// Two creations (taken by the limiter, published by the aggregator's
	// take relay), and the visit's
	// two events (published by the shortener): nothing for the 404. Two
	// producers, keys in different partitions, and the limiter's publisher
	// lingers (--publish-linger) to share produce requests: the topic holds
	// the four in no order of their calls.
	evs := readEvents(t, s.st, 4)
	got := make([]string, len(evs))
	for i, e := range evs {
		got[i] = e.Action + " " + e.Key()
		if e.Kind == "link" && e.Attrs["ip"] != "198.51.100.7" || e.Action == "visit" && e.Kind == "ip" && e.Attrs["link"] != code {
			t.Errorf("event %s: attrs %v", got[i], e.Attrs)
		}
	}
	want := []string{"link_create ip:192.0.2.10", "link_create ip:192.0.2.11", "visit ip:198.51.100.7", "visit link:" + code}
	if !sameSet(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

func sameSet(a, b []string) bool {
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		m[s]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return len(a) == len(b)
}

func TestBadRequests(t *testing.T) {
	s := newStack(t, CLI{TrustedProxies: []string{"127.0.0.1/32"}})
	for i, tc := range []struct {
		ct, body string
		status   int
		want     string
	}{
		{"application/json", `{"url": ""}`, 400, "url is required"},
		{"application/json", `{"url": "ftp://example.com/x"}`, 400, "http or https"},
		{"application/json", `{"url": "example.com/x"}`, 400, "http or https"},
		{"application/json", `{"url": "https://user:pw@example.com/"}`, 400, "user info"},
		{"application/json", `{"url": "http://"}`, 400, "no host"},
		{"application/json", `{"url": "https://example.com/` + strings.Repeat("a", 2100) + `"}`, 400, "at most 2048"},
		{"application/json", `{"url": `, 400, "want {\"url\""},
		{"application/json", `{"url": "https://example.com/` + strings.Repeat("a", 9000) + `"}`, 413, "larger than"},
	} {
		// Each from its own IP: the strict rule counts bad requests too.
		a := send(t, "POST", s.shortener+"/links", tc.ct, tc.body, map[string]string{"X-Forwarded-For": "192.0.2." + strconv.Itoa(100+i)})
		msg, _ := a.body["error"].(string)
		if a.status != tc.status || !strings.Contains(msg, tc.want) || a.header.Get("Content-Type") != "application/json" {
			t.Errorf("%.60s: %d %s; want %d with %q", tc.body, a.status, a.raw, tc.status, tc.want)
		}
	}
}

// Link creation is strict: exactly the limit is admitted, then 429 with
// Retry-After from the shortener, while other IPs still create.
func TestCreateLimitedPerIP(t *testing.T) {
	s := newStack(t, CLI{TrustedProxies: []string{"127.0.0.1/32"}})
	for i := range 3 {
		if a := createLink(t, s.shortener, "https://example.com/"+strconv.Itoa(i), "203.0.113.50"); a.status != http.StatusCreated {
			t.Fatalf("create %d: %d %s", i, a.status, a.raw)
		}
	}
	a := createLink(t, s.shortener, "https://example.com/3", "203.0.113.50")
	retry, _ := strconv.Atoi(a.header.Get("Retry-After"))
	if a.status != http.StatusTooManyRequests || retry < 1 || retry > 60 || a.body["rule"] != "link-create" || a.body["message"] != "Too many new links." {
		t.Fatalf("4th create: %d Retry-After %q %s", a.status, a.header.Get("Retry-After"), a.raw)
	}
	if b := createLink(t, s.shortener, "https://example.com/3", "203.0.113.51"); b.status != http.StatusCreated {
		t.Fatalf("other ip: %d %s", b.status, b.raw)
	}
	// Without trusting the proxy, the header is ignored: the peer is the
	// client (and is not limited yet).
	direct := newStack(t, CLI{})
	for i := range 4 {
		want := http.StatusCreated
		if i == 3 {
			want = http.StatusTooManyRequests
		}
		if a := createLink(t, direct.shortener, "https://example.com/d"+strconv.Itoa(i), "203.0.113."+strconv.Itoa(i)); a.status != want {
			t.Fatalf("untrusted header, create %d: %d %s; want %d", i, a.status, a.raw, want)
		}
	}
}

// The shortener is a client of floodgate's public packages only.
func TestLinksNoServerPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	imports, err := exec.Command("go", "list", "-f", `{{range .Imports}}{{$.ImportPath}} {{.}}{{"\n"}}{{end}}`, "./...").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(imports), "\n") {
		if pkg, imp, ok := strings.Cut(l, " "); ok && strings.Contains(imp, "github.com/floodgate-dev/floodgate/internal/") {
			t.Errorf("%s imports %s: an example of a client uses floodgate's public packages only", pkg, imp)
		}
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{"github.com/floodgate-dev/floodgate/internal/window", "github.com/floodgate-dev/floodgate/internal/consume", "github.com/floodgate-dev/floodgate/internal/decide", "github.com/floodgate-dev/floodgate/internal/history", "github.com/floodgate-dev/floodgate/internal/rules/reload", "github.com/redis/go-redis"} {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("the shortener links %s", dep)
			}
		}
	}
	if !bytes.Contains(out, []byte("github.com/floodgate-dev/floodgate/limiter/limiterclient\n")) {
		t.Errorf("go list -deps names no limiterclient:\n%s", out)
	}
}
