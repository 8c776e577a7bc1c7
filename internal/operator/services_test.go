package operator_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/producer"
)

const svcRules = `
rules:
  - name: login-failed
    action: login_failed
    kinds: [ip]
    limits: [5/1m, 20/1h]
    message: Too many failed logins.
  - name: reset-mail
    action: password_reset
    kinds: [email]
    limits: [3/1h]
    strict: true
  - name: visits
    action: visit
    kinds: [ip]
    limits: [100/1m, 100000/1h]
`

const (
	checkToken  = "check-token-0123456789"
	aliceSecret = "alice-secret-0123456789"
	bobSecret   = "bob-secret-0123456789ab"
	svcParts    = 4
)

// UnbanBound is the bound stated in docs/operations.md for an operator
// action to reach every running limiter that follows its partition: one
// change-stream read (their XREAD BLOCK returns with the entry), which is
// milliseconds; the bound leaves room for a loaded shared test machine.
const UnbanBound = time.Second

// services are the real binaries on a topic and key prefix of the test's
// own: an aggregator (live group and decisions relay), limiter A (admin
// endpoints for alice and bob, a check token) and limiter B (no admin
// token, so no admin endpoints), and the CLI.
type services struct {
	bin        string
	st         servicetest.Stack
	group      string
	store      *window.Store
	pub        *producer.Publisher
	limA, limB *servicetest.Service
	adminURL   string
	idleAdmin  string
}

func startServices(t *testing.T) *services {
	t.Helper()
	bs := stacktest.Brokers(t)
	rdb := stacktest.Redis(t)
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(svcRules), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &services{bin: servicetest.Build(t, servicetest.Floodgate)}
	s.st = servicetest.Stack{Brokers: bs, RedisAddr: stacktest.RedisAddr(), Topic: stacktest.Topic(t, bs, svcParts),
		DecisionsTopic: stacktest.Topic(t, bs, 1), Prefix: stacktest.Prefix(t, rdb), Rules: rulesPath}
	s.group = "fgtest-" + strings.ReplaceAll(s.st.Topic, ".", "-") + "-live" // servicetest.Aggregator's
	var err error
	if s.store, err = window.NewStore(rdb, window.StoreConfig{Prefix: s.st.Prefix, Partitions: func() int { return svcParts }}); err != nil {
		t.Fatal(err)
	}
	if s.pub, err = producer.New(producer.Config{Brokers: bs, Topic: s.st.Topic, BatchTimeout: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.pub.Close(); err != nil {
			t.Error(err)
		}
	})
	servicetest.Aggregator(t, s.bin, s.st, "--no-history")
	adminAddr := servicetest.FreeAddr(t)
	s.adminURL = "http://" + adminAddr
	s.limA = servicetest.Limiter(t, s.bin, s.st, "--timeout", "2s", "--auth-token", checkToken,
		"--admin-addr", adminAddr, "--admin-token", "alice="+aliceSecret+",bob="+bobSecret, "--live-group", s.group)
	s.idleAdmin = servicetest.FreeAddr(t)
	s.limB = servicetest.Limiter(t, s.bin, s.st, "--timeout", "2s", "--admin-addr", s.idleAdmin)
	return s
}

// call sends an HTTP request and returns the status and the body.
func call(t *testing.T, method, url, token string, hdr map[string]string) (int, []byte, http.Header) {
	t.Helper()
	code, body, h, err := send(method, url, token, hdr)
	if err != nil {
		t.Fatal(err)
	}
	return code, body, h
}

func send(method, url, token string, hdr map[string]string) (int, []byte, http.Header, error) {
	r, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
}

// decide asks a limiter: "check" (memory), "exact" or "take".
func (s *services) decide(t *testing.T, lim *servicetest.Service, how, query string) (int, []byte) {
	t.Helper()
	code, body, err := s.ask(lim, how, query)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

func (s *services) ask(lim *servicetest.Service, how, query string) (int, []byte, error) {
	tok := ""
	if lim == s.limA {
		tok = checkToken
	}
	method, path, hdr := http.MethodGet, "/v1/check?", map[string]string{}
	switch how {
	case "exact":
		hdr["Floodgate-Exact"] = "1"
	case "take":
		method, path = http.MethodPost, "/v1/take?"
	}
	code, body, _, err := send(method, lim.URL+path+query, tok, hdr)
	return code, body, err
}

// admin calls limiter A's admin endpoint as alice.
func (s *services) admin(t *testing.T, method, op, query string, hdr map[string]string) (int, []byte) {
	t.Helper()
	code, body, _ := call(t, method, s.adminURL+"/v1/admin/"+op+"?"+query, aliceSecret, hdr)
	return code, body
}

// cli runs the floodgate binary with the test's stack in its environment.
func (s *services) cli(t *testing.T, args ...string) []byte {
	t.Helper()
	return runCLI(t, s.bin, []string{"FLOODGATE_BROKERS=" + strings.Join(s.st.Brokers, ","), "FLOODGATE_REDIS_ADDR=" + s.st.RedisAddr,
		"FLOODGATE_TOPIC=" + s.st.Topic, "FLOODGATE_KEY_PREFIX=" + s.st.Prefix, "FLOODGATE_RULES=" + s.st.Rules}, args...)
}

// runCLI runs bin with args and env (and no other FLOODGATE_ variable) and
// returns its standard output.
func runCLI(t *testing.T, bin string, env []string, args ...string) []byte {
	t.Helper()
	cmd := cliCommand(bin, env, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("floodgate %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// cliCommand is bin with args and env (and no other FLOODGATE_ variable).
func cliCommand(bin string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOODGATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// waitCounted waits until the aggregator has applied every message of the
// events topic.
func (s *services) waitCounted(t *testing.T) {
	t.Helper()
	kc := &kafka.Client{Addr: kafka.TCP(s.st.Brokers...), Timeout: 10 * time.Second}
	ctx := context.Background()
	var reqs []kafka.OffsetRequest
	for p := range svcParts {
		reqs = append(reqs, kafka.LastOffsetOf(p))
	}
	lo, err := kc.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{s.st.Topic: reqs}})
	if err != nil {
		t.Fatal(err)
	}
	for _, po := range lo.Topics[s.st.Topic] {
		if po.Error != nil {
			t.Fatal(po.Error)
		}
		waitFor(t, "the aggregator to count the topic", func() bool {
			next, ok, err := s.store.Resume(ctx, s.group, s.st.Topic, po.Partition)
			if err != nil {
				t.Fatal(err)
			}
			return po.LastOffset == 0 || ok && next >= po.LastOffset
		})
	}
}

// publish produces n events of one subject now.
func (s *services) publish(t *testing.T, action, kind, subject string, n int) {
	t.Helper()
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = event.Event{ID: event.NewID(), Action: action, Kind: kind, Subject: subject, TS: time.Now()}
	}
	if err := s.pub.Publish(context.Background(), evs...); err != nil {
		t.Fatal(err)
	}
}

// untilEvery waits until every limiter answers status to query, each
// polled without pause, and returns how long after since the slowest did.
func (s *services) untilEvery(t *testing.T, how, query string, status int, since time.Time) time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	took := make([]time.Duration, 2)
	errs := make([]error, 2)
	for i, lim := range []*servicetest.Service{s.limA, s.limB} {
		wg.Go(func() {
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				code, _, err := s.ask(lim, how, query)
				if err != nil {
					errs[i] = err
					return
				}
				if code == status {
					took[i] = time.Since(since)
					return
				}
			}
			took[i] = -1
		})
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || took[0] < 0 || took[1] < 0 {
		t.Fatalf("%s %s: not every limiter answered %d within 30s (%v, %v)", how, query, status, took, errs)
	}
	return max(took[0], took[1])
}

// The "done when", against running services: a denied subject is
// admitted by every limiter within the stated bound after an unban; a ban
// denies a subject with no counts in checks, exact checks and takes; a
// reset zeroes a subject's windows while the aggregator keeps counting it
// exactly; every action's audit record reaches the decisions topic; admin
// calls need the admin token; bad requests get 400.
func TestOperatorControlsOnRunningServices(t *testing.T) {
	s := startServices(t)
	var resetOffset int64 = -1

	t.Run("unban reaches every limiter", func(t *testing.T) {
		const q = "action=login_failed&ip=203.0.113.10"
		s.publish(t, "login_failed", "ip", "203.0.113.10", 6)
		s.untilEvery(t, "check", q, http.StatusTooManyRequests, time.Now())
		s.waitCounted(t) // no batch left to deny it again
		start := time.Now()
		code, body := s.admin(t, http.MethodPost, "unban", q, nil)
		if code != http.StatusOK {
			t.Fatalf("unban: %d %s", code, body)
		}
		var res operator.Result
		if err := json.Unmarshal(body, &res); err != nil {
			t.Fatal(err)
		}
		if res.Operator != "alice" || res.AppliedHere == nil || !*res.AppliedHere || !strings.Contains(strings.Join(res.Subjects[0].Cleared, ","), "deny") {
			t.Fatalf("unban result %s", body)
		}
		took := s.untilEvery(t, "check", q, http.StatusOK, start)
		t.Logf("unban: every limiter admits %s after the admin call was sent", took)
		if took > UnbanBound {
			t.Errorf("unban reached every limiter in %s, more than the stated %s", took, UnbanBound)
		}
		// The counts stay: the exact count still says over 5/1m.
		if code, body := s.decide(t, s.limB, "exact", q); code != http.StatusTooManyRequests {
			t.Errorf("exact check after unban: %d %s (the counts stay)", code, body)
		}
	})

	t.Run("ban of a subject with no counts, through the CLI", func(t *testing.T) {
		const q = "action=password_reset&email=nobody@example.com"
		out := s.cli(t, "ban", "--action", "password_reset", "email=nobody@example.com", "--for", "1h", "-m", "ticket 12", "--operator", "carol")
		if !strings.Contains(string(out), "banned until") {
			t.Fatalf("ban output %s", out)
		}
		took := s.untilEvery(t, "check", q, http.StatusTooManyRequests, time.Now())
		t.Logf("ban: every limiter denies %s after the CLI returned", took)
		for _, lim := range []*servicetest.Service{s.limA, s.limB} {
			for _, how := range []string{"check", "exact", "take"} {
				code, body := s.decide(t, lim, how, q)
				if code != http.StatusTooManyRequests || !strings.Contains(string(body), `"banned":true`) || !strings.Contains(string(body), "ticket 12") {
					t.Fatalf("%s %s of a banned subject: %d %s", lim.Addr, how, code, body)
				}
			}
		}
		if out := s.cli(t, "inspect", "--action", "password_reset", "email=nobody@example.com"); !strings.Contains(string(out), "is banned by carol") {
			t.Fatalf("inspect of a banned subject:\n%s", out)
		}
		s.cli(t, "unban", "--action", "password_reset", "email=nobody@example.com", "--operator", "carol")
		s.untilEvery(t, "check", q, http.StatusOK, time.Now())
		if code, body := s.decide(t, s.limB, "take", q); code != http.StatusOK || !strings.Contains(string(body), `"counted":true`) {
			t.Fatalf("take after unban: %d %s", code, body)
		}
	})

	t.Run("reset while the aggregator counts", func(t *testing.T) {
		resetOffset = s.resetWhileCounting(t, "203.0.113.20")
	})

	t.Run("admin token", func(t *testing.T) {
		const path = "/v1/admin/unban?action=login_failed&ip=203.0.113.10"
		for name, tok := range map[string]string{"none": "", "wrong": "not-a-token-0123456789", "the check token": checkToken} {
			code, body, hdr := call(t, http.MethodPost, s.adminURL+path, tok, nil)
			if code != http.StatusUnauthorized || hdr.Get("WWW-Authenticate") == "" || !strings.Contains(string(body), `"error"`) {
				t.Errorf("admin call with %s token: %d %s", name, code, body)
			}
		}
		if code, _, _ := call(t, http.MethodGet, s.limA.URL+"/v1/check?action=login_failed&ip=192.0.2.1", aliceSecret, nil); code != http.StatusUnauthorized {
			t.Errorf("the admin token opened /v1/check: %d", code)
		}
		if code, body, _ := call(t, http.MethodGet, s.adminURL+"/v1/admin/inspect?action=login_failed&ip=203.0.113.10", bobSecret, nil); code != http.StatusOK {
			t.Errorf("inspect as bob: %d %s", code, body)
		}
		if _, err := http.Get("http://" + s.idleAdmin + "/v1/admin/inspect"); err == nil {
			t.Error("limiter B serves admin endpoints without an admin token")
		}
		// The profiler is on the admin listener, behind the same tokens.
		if code, _, _ := call(t, http.MethodGet, s.adminURL+"/debug/pprof/", "", nil); code != http.StatusUnauthorized {
			t.Errorf("/debug/pprof/ without a token: %d, want 401", code)
		}
		if code, body, _ := call(t, http.MethodGet, s.adminURL+"/debug/pprof/heap?debug=1", bobSecret, nil); code != http.StatusOK || !strings.Contains(string(body), "heap profile") {
			t.Errorf("/debug/pprof/heap as bob: %d %.80s", code, body)
		}
		_, metrics, _ := call(t, http.MethodGet, s.limA.URL+"/metrics", "", nil)
		for _, m := range []string{`floodgate_admin_actions_total{action="unban",result="unauthenticated"} 3`, `floodgate_admin_actions_total{action="unban",result="ok"} 1`} {
			if !strings.Contains(string(metrics), m) {
				t.Errorf("metrics lack %s", m)
			}
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, c := range []struct {
			name, method, op, query string
			hdr                     map[string]string
			want                    int
		}{
			{"no action", "GET", "inspect", "ip=192.0.2.1", nil, 400},
			{"no subject", "GET", "inspect", "action=login_failed", nil, 400},
			{"bad kind", "GET", "inspect", "action=login_failed&I%20P=1", nil, 400},
			{"ban without duration", "POST", "ban", "action=login_failed&ip=192.0.2.1", nil, 400},
			{"ban of a bad duration", "POST", "ban", "action=login_failed&ip=192.0.2.1", map[string]string{operator.HeaderFor: "1x"}, 400},
			{"ban of an unlimited action", "POST", "ban", "action=nothing&ip=192.0.2.1", map[string]string{operator.HeaderFor: "1h"}, 400},
			{"unban with a duration", "POST", "unban", "action=login_failed&ip=192.0.2.1", map[string]string{operator.HeaderFor: "1h"}, 400},
			{"reset of one rule", "POST", "reset", "action=login_failed&ip=192.0.2.1", map[string]string{operator.HeaderRule: "login-failed"}, 400},
			{"ban by GET", "GET", "ban", "action=login_failed&ip=192.0.2.1", nil, 405},
			{"inspect", "GET", "inspect", "action=login_failed&ip=192.0.2.1", nil, 200},
		} {
			code, body := s.admin(t, c.method, c.op, c.query, c.hdr)
			if code != c.want || (c.want == 400 && !strings.Contains(string(body), `"error":`)) {
				t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
			}
		}
	})

	t.Run("through --admin-url", s.throughAdminURL)

	t.Run("audit on the decisions topic", func(t *testing.T) {
		want := map[string]func(window.DecisionMessage) bool{
			"deny of 203.0.113.10": func(d window.DecisionMessage) bool {
				return d.Type == "" && d.Subject == "203.0.113.10" && d.Rule == "login-failed"
			},
			"unban by alice": func(d window.DecisionMessage) bool {
				return d.Type == window.DecisionUnban && d.Operator == "alice" && d.Subject == "203.0.113.10"
			},
			"ban by carol": func(d window.DecisionMessage) bool {
				return d.Type == window.DecisionBan && d.Operator == "carol" && d.Subject == "nobody@example.com" &&
					d.Message == "ticket 12" && d.Until.Sub(d.TS) == time.Hour
			},
			"unban by carol": func(d window.DecisionMessage) bool {
				return d.Type == window.DecisionUnban && d.Operator == "carol" && d.Kind == "email" && len(d.Cleared) == 1
			},
			"reset by dave": func(d window.DecisionMessage) bool {
				return d.Type == window.DecisionReset && d.Operator == "dave" && d.Subject == "203.0.113.20" && d.Offset == resetOffset && d.DeletedKeys > 0
			},
		}
		readAudit(t, s.st.Brokers, s.st.DecisionsTopic, want)
	})
}

// resetWhileCounting keeps producing events of one subject while the CLI
// resets it, then checks that its windows hold exactly the events at or
// after the reset's boundary offset: those counted before are gone, none
// after is lost or counted twice. It returns the boundary.
func (s *services) resetWhileCounting(t *testing.T, ip string) int64 {
	t.Helper()
	ctx := context.Background()
	sub := window.Subject{Action: "visit", Kind: "ip", Subject: ip}
	count := func() int64 {
		st, err := s.store.Check(ctx, time.Now(), []window.Query{{Subject: sub, Windows: []time.Duration{time.Hour}}})
		if err != nil {
			t.Fatal(err)
		}
		return st[0].Sums[0]
	}
	var mu sync.Mutex
	published := 0
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			evs := make([]event.Event, 5)
			for i := range evs {
				evs[i] = event.Event{ID: event.NewID(), Action: "visit", Kind: "ip", Subject: ip, TS: time.Now()}
			}
			if err := s.pub.Publish(ctx, evs...); err != nil {
				done <- err
				return
			}
			mu.Lock()
			published += len(evs)
			mu.Unlock()
		}
	}()
	pubCount := func() int { mu.Lock(); defer mu.Unlock(); return published }
	waitFor(t, "the aggregator to count 150 events of the subject", func() bool { return count() >= 150 })

	var res operator.Result
	if err := json.Unmarshal(s.cli(t, "reset", "--action", "visit", "ip="+ip, "--operator", "dave", "--group", s.group, "--json"), &res); err != nil {
		t.Fatal(err)
	}
	atReset := pubCount()
	waitFor(t, "100 more events published after the reset", func() bool { return pubCount() >= atReset+100 })
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sr := res.Subjects[0]
	if sr.Offset == nil || sr.DeletedKeys == 0 {
		t.Fatalf("reset result %+v", sr)
	}
	s.waitCounted(t)
	after := eventsFrom(t, s.st.Brokers, s.st.Topic, sr.Partition, *sr.Offset, "ip:"+ip)
	got := count()
	t.Logf("reset at offset %d of partition %d: %d events published, %d counted after the boundary, window holds %d", *sr.Offset, sr.Partition, pubCount(), after, got)
	if got != after || after == 0 || after >= int64(pubCount()) {
		t.Fatalf("window holds %d events after the reset, want exactly the %d at or after offset %d (of %d published)", got, after, *sr.Offset, pubCount())
	}
	return *sr.Offset
}

// eventsFrom counts the messages with key in a partition from offset on.
func eventsFrom(t *testing.T, brokers []string, topic string, partition int, offset int64, key string) int64 {
	t.Helper()
	kc := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	lo, err := kc.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(partition)}}})
	if err != nil {
		t.Fatal(err)
	}
	end := lo.Topics[topic][0].LastOffset
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: partition, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(offset); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int64
	for next := offset; next < end; {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read %s/%d at %d (end %d): %v", topic, partition, next, end, err)
		}
		if string(m.Key) == key {
			n++
		}
		next = m.Offset + 1
	}
	return n
}

// readAudit reads the decisions topic until every wanted record was seen,
// each with an id.
func readAudit(t *testing.T, brokers []string, topic string, want map[string]func(window.DecisionMessage) bool) {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(want) > 0 {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read decisions, still missing %d: %v", len(want), err)
		}
		var d window.DecisionMessage
		if err := json.Unmarshal(m.Value, &d); err != nil {
			t.Fatalf("decision %s: %v", m.Value, err)
		}
		if d.ID == "" || string(m.Key) != d.Kind+":"+d.Subject {
			t.Fatalf("decision %s keyed %s: no id or wrong key", m.Value, m.Key)
		}
		for name, ok := range want {
			if ok(d) {
				t.Logf("audit %s: %s", name, m.Value)
				delete(want, name)
			}
		}
	}
}
