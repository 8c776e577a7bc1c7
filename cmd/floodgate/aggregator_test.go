package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// These tests run the real binary against the stack (scripts/stack up),
// reached through stacktest: they fail when a service is down, and skip only
// under -short.

// liveEnv is one test's private world: topics, groups, key prefix, history
// database, binary.
type liveEnv struct {
	t                        testing.TB
	cfg                      envConfig
	brokers                  []string
	rdb                      redis.UniversalClient
	redisAddrs               []string // what the binary is given: one server, or a cluster's seeds
	bin, dir                 string
	topic, dlq, decisions    string
	group, prefix, rulesPath string
	store                    *window.Store
	partitions               int
	// With cfg.history: the history group's database (of the test's own)
	// and group.
	pool         *pgxpool.Pool
	pgURL        string
	historyGroup string
	mu           sync.Mutex
	produced     map[string]int64 // subject -> events
	extraArgs    []string
}

// envConfig says where a liveEnv runs and what its aggregators run.
type envConfig struct {
	partitions int
	rules      string
	// cluster runs on scripts/stack's --cluster profile: three brokers (the
	// events topic with replication factor 3 and min.insync.replicas 2) and
	// a Redis Cluster. Default: the single-node stack.
	cluster bool
	// history runs the history group (Postgres) beside the live one, in a
	// database of the test's own. Default: --no-history.
	history bool
}

func newLiveEnv(t *testing.T, partitions int, rulesYAML string) *liveEnv {
	t.Helper()
	return newEnv(t, envConfig{partitions: partitions, rules: rulesYAML})
}

func newLiveEnvTB(t testing.TB, partitions int, rulesYAML string) *liveEnv {
	t.Helper()
	return newEnv(t, envConfig{partitions: partitions, rules: rulesYAML})
}

func newEnv(t testing.TB, cfg envConfig) *liveEnv {
	t.Helper()
	e := &liveEnv{
		t: t, cfg: cfg, dir: t.TempDir(),
		bin:        servicetest.Build(t, servicetest.Floodgate),
		partitions: cfg.partitions,
		produced:   map[string]int64{},
	}
	e.rulesPath = filepath.Join(e.dir, "rules.yaml")
	if err := os.WriteFile(e.rulesPath, []byte(cfg.rules), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var specs []topics.Spec
	if cfg.cluster {
		e.brokers = stacktest.ClusterBrokers(t)
		cc := stacktest.ClusterRedis(t)
		e.rdb, e.redisAddrs, e.prefix = cc, stacktest.ClusterRedisAddrs(), stacktest.ClusterPrefix(t, cc)
		// The events topic is the one that must survive a broker kill:
		// replicated, acks=all writes need two in-sync replicas.
		e.topic = stacktest.ClusterTopic(t, e.brokers, cfg.partitions)
	} else {
		e.brokers = stacktest.Brokers(t)
		rdb := stacktest.Redis(t)
		e.rdb, e.redisAddrs, e.prefix = rdb, []string{rdb.Options().Addr}, stacktest.Prefix(t, rdb)
		name := strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
				return r
			}
			return '-'
		}, strings.ToLower(t.Name()))
		e.topic = fmt.Sprintf("fgtest.%s-%d", name, time.Now().UnixNano()%1e9)
		specs = append(specs, topics.Spec{Name: e.topic, Partitions: cfg.partitions})
	}
	id := strings.TrimPrefix(e.topic, "fgtest.")
	e.dlq, e.decisions = e.topic+".dlq", e.topic+".decisions"
	e.group = "fgtest-live-" + id
	specs = append(specs, topics.Spec{Name: e.dlq, Partitions: 1}, topics.Spec{Name: e.decisions, Partitions: 1})
	if _, err := topics.Ensure(ctx, e.brokers, specs...); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	// The aggregator refuses to start without its output topics: wait
	// until the brokers' metadata lists them.
	for {
		have, err := topics.Partitions(ctx, e.brokers, e.dlq, e.decisions)
		if err == nil && have[e.dlq] > 0 && have[e.decisions] > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("topics %s, %s not in metadata: %v (have %v)", e.dlq, e.decisions, err, have)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		names := []string{e.dlq, e.decisions}
		if !cfg.cluster {
			names = append(names, e.topic) // ClusterTopic deletes its own
		}
		if err := topics.Delete(ctx, e.brokers, names...); err != nil {
			t.Logf("delete topics: %v", err)
		}
	})
	if cfg.history {
		e.pool = historytest.Pool(t)
		e.pgURL = e.pool.Config().ConnString()
		e.historyGroup = "fgtest-history-" + id
	}
	st, err := window.NewStore(e.rdb, window.StoreConfig{Prefix: e.prefix, Partitions: func() int { return cfg.partitions }})
	if err != nil {
		t.Fatal(err)
	}
	e.store = st
	return e
}

// proc is one running aggregator.
type proc struct {
	cmd  *exec.Cmd
	done chan error
	name string
}

func (e *liveEnv) start(name string) *proc {
	e.t.Helper()
	args := []string{"--metrics-addr", "127.0.0.1:0"}
	if e.cfg.history {
		args = append(args, "--history-group", e.historyGroup, "--postgres-url", e.pgURL)
	} else {
		args = append(args, "--no-history")
	}
	return e.run(name, append(args, e.extraArgs...)...)
}

// run starts `floodgate aggregator` on the env's topics, group, prefix and
// rules, with args after those.
func (e *liveEnv) run(name string, args ...string) *proc {
	e.t.Helper()
	args = append([]string{"aggregator",
		"--topic", e.topic, "--dlq-topic", e.dlq, "--decisions-topic", e.decisions,
		"--live-group", e.group, "--key-prefix", e.prefix, "--rules", e.rulesPath,
		"--session-timeout", "6s", "--batch-wait", "20ms",
		"--log-level", "debug",
	}, args...)
	cmd := exec.Command(e.bin, args...)
	// Several Redis addresses make the binary a cluster client.
	cmd.Env = append(os.Environ(), "FLOODGATE_BROKERS="+strings.Join(e.brokers, ","), "FLOODGATE_REDIS_ADDR="+strings.Join(e.redisAddrs, ","))
	logf, err := os.Create(filepath.Join(e.dir, name+".log"))
	if err != nil {
		e.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan error, 1), name: name}
	go func() { p.done <- cmd.Wait(); logf.Close() }()
	e.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.done
		}
		if e.t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 6000 && os.Getenv("FG_FULL_LOGS") == "" {
				b = b[len(b)-6000:]
			}
			e.t.Logf("---- %s log (tail) ----\n%s", name, b)
		}
	})
	return p
}

// crashRounds is the crash tests' loop, rounds times: send steps batches,
// each while the running process keeps reading (it waits until the
// process's floodgate_aggregator_messages_in_total grew after a batch);
// SIGKILL it just after it read batch killAt, in the middle of applying it;
// send the rest while it is down (a backlog for the next); start the next.
// It returns the last process, running, named run<rounds>.
func (e *liveEnv) crashRounds(t *testing.T, rounds, steps, killAt int, send func()) *proc {
	t.Helper()
	p := e.start("run0")
	for round := range rounds {
		addr := metricsAddr(t, e, p.name)
		read := func() float64 {
			body, err := httpGet(addr)
			if err != nil {
				return -1
			}
			return metricValue(body, "floodgate_aggregator_messages_in_total", "")
		}
		seen := max(read(), 0)
		for i := range steps {
			send()
			if i > killAt {
				continue // down: the batch waits for the next process
			}
			stacktest.WaitFor(t, p.name+" reading", 60*time.Second, func() bool {
				v := read()
				grew := v > seen
				seen = max(seen, v)
				return grew
			})
			if i == killAt {
				p.kill(t)
				t.Logf("round %d: %s SIGKILLed after reading batch %d of %d", round, p.name, i+1, steps)
			}
		}
		p = e.start(fmt.Sprintf("run%d", round+1))
	}
	return p
}

func (p *proc) kill(tb testing.TB) {
	tb.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		tb.Fatal(err)
	}
	<-p.done
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(tb testing.TB) {
	tb.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		tb.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			tb.Fatalf("%s: graceful stop: %v", p.name, err)
		}
	case <-time.After(30 * time.Second):
		tb.Fatalf("%s: no exit 30s after SIGTERM", p.name)
	}
}

func (e *liveEnv) writer() *kafka.Writer {
	return &kafka.Writer{
		Addr: kafka.TCP(e.brokers...), Topic: e.topic, Balancer: &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: 2 * time.Millisecond,
	}
}

// produce writes n valid events round-robin over subjects and records them.
func (e *liveEnv) produce(ctx context.Context, w *kafka.Writer, action string, subjects []string, n int, offset int) {
	e.t.Helper()
	msgs := make([]kafka.Message, 0, n)
	counts := map[string]int64{}
	for i := 0; i < n; i++ {
		s := subjects[(offset+i)%len(subjects)]
		ev := event.Event{ID: event.NewID(), Action: action, Kind: "k", Subject: s, TS: time.Now()}
		v, err := event.Encode(ev)
		if err != nil {
			e.t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(ev.Key()), Value: v})
		counts[s]++
	}
	writeAll(e.t, ctx, w, msgs)
	e.mu.Lock()
	for s, c := range counts {
		e.produced[s] += c
	}
	e.mu.Unlock()
}

// counters reads every produced subject's 1-day window.
func (e *liveEnv) counters(action string) (map[string]int64, error) {
	e.mu.Lock()
	subs := make([]string, 0, len(e.produced))
	for s := range e.produced {
		subs = append(subs, s)
	}
	e.mu.Unlock()
	return e.countersOf(action, subs)
}

// countersOf reads the 1-day window of each subject of action (kind k), in
// one round trip per slot.
func (e *liveEnv) countersOf(action string, subjects []string) (map[string]int64, error) {
	qs := make([]window.Query, 0, len(subjects))
	for _, s := range subjects {
		qs = append(qs, window.Query{Subject: window.Subject{Action: action, Kind: "k", Subject: s}, Windows: []time.Duration{24 * time.Hour}})
	}
	states, err := e.store.Check(context.Background(), time.Now(), qs)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for i, q := range qs {
		out[q.Subject.Subject] = states[i].Sums[0]
	}
	return out, nil
}

// waitExact waits until every subject's counter equals its produced count
// and fails if a counter ever exceeds it (a double count) or time runs out.
func (e *liveEnv) waitExact(action string, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var last map[string]int64
	for {
		got, err := e.counters(action)
		if err != nil {
			e.t.Fatal(err)
		}
		last = got
		e.mu.Lock()
		exact, total, counted := true, int64(0), int64(0)
		for s, want := range e.produced {
			total += want
			counted += got[s]
			if got[s] > want {
				e.mu.Unlock()
				e.t.Fatalf("subject %s counted %d, produced %d: double count", s, got[s], want)
			}
			if got[s] != want {
				exact = false
			}
		}
		e.mu.Unlock()
		if exact {
			e.t.Logf("all %d subjects exact: %d events counted once", len(got), total)
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("after %s: %d of %d events counted; counters %v, produced %v", timeout, counted, total, last, e.produced)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkOffsets verifies the stored next offset of every partition equals
// its end: everything consumed, nothing skipped past.
func (e *liveEnv) checkOffsets() {
	e.t.Helper()
	for part, end := range e.logEnds() {
		next, ok, err := e.store.Resume(context.Background(), e.group, e.topic, part)
		if err != nil {
			e.t.Fatal(err)
		}
		if end > 0 && (!ok || next != end) {
			e.t.Errorf("partition %d: stored next offset %d (ok=%v), log end %d", part, next, ok, end)
		}
	}
}

// logEnds returns each partition's log end offset.
func (e *liveEnv) logEnds() map[int]int64 {
	e.t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(e.brokers...)}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := 0; p < e.partitions; p++ {
		req.Topics[e.topic] = append(req.Topics[e.topic], kafka.LastOffsetOf(p))
	}
	resp, err := client.ListOffsets(context.Background(), req)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int]int64{}
	for _, po := range resp.Topics[e.topic] {
		if po.Error != nil {
			e.t.Fatalf("list offsets partition %d: %v", po.Partition, po.Error)
		}
		out[po.Partition] = po.LastOffset
	}
	return out
}

const countRules = `
rules:
  - name: count
    action: crash
    kinds: [k]
    limits: [100000000/1d]
`

func subjects(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "u" + strconv.Itoa(i)
	}
	return out
}

// TestAggregatorCrashExactlyOnce SIGKILLs the aggregator several times while
// events flow; at the end every subject's counter equals the events
// produced for it.
func TestAggregatorCrashExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 6, countRules)
	// A part per subject (three fields each): every checkpoint goes in
	// parts, and the kills land between them too.
	e.extraArgs = []string{"--checkpoint-part", "4"}
	ctx := context.Background()
	w := e.writer()
	defer w.Close()
	subs := subjects(40)

	sent := 0
	p := e.crashRounds(t, 4, 25, 15, func() {
		e.produce(ctx, w, "crash", subs, 80, sent)
		sent += 80
	})
	e.produce(ctx, w, "crash", subs, 500, sent)
	e.waitExact("crash", 90*time.Second)
	p.stop(t)
	e.checkOffsets()
}

// TestAggregatorRebalanceExactlyOnce runs two members of one group and stops
// one midway: its partitions move to the other and the counters stay exact.
func TestAggregatorRebalanceExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 6, countRules)
	ctx := context.Background()
	w := e.writer()
	defer w.Close()
	subs := subjects(40)

	a := e.start("a")
	b := e.start("b")
	sent := 0
	for i := 0; i < 60; i++ {
		e.produce(ctx, w, "crash", subs, 50, sent)
		sent += 50
		if i == 30 {
			a.stop(t)
			t.Logf("member a stopped after %d events", sent)
			for _, name := range []string{"a", "b"} {
				if b, _ := os.ReadFile(filepath.Join(e.dir, name+".log")); !bytes.Contains(b, []byte("partition started")) {
					t.Fatalf("member %s never owned a partition: the group was not shared", name)
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.waitExact("crash", 90*time.Second)
	b.stop(t)
	e.checkOffsets()
}

// TestAggregatorPoisonAndDecisions mixes garbage and half-valid messages
// into the stream: each reaches the DLQ with its reason, the valid events
// around them are counted, and a subject over its limit gets one deny
// record and one decision on the decisions topic.
func TestAggregatorPoisonAndDecisions(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 3, countRules+`
  - name: hot
    action: hot
    kinds: [k]
    limits: [3/1m]
    message: too hot
`)
	ctx := context.Background()
	w := e.writer()
	defer w.Close()
	p := e.start("run")
	subs := subjects(10)

	now := time.Now()
	valid := func(s string) []byte {
		v, _ := event.Encode(event.Event{ID: event.NewID(), Action: "crash", Kind: "k", Subject: s, TS: now})
		return v
	}
	poison := []struct {
		key, value string
		reason     string
	}{
		{"k:u1", "not json at all", event.ReasonInvalidJSON},
		{"k:u1", "\xff\xfe\x00garbage", event.ReasonInvalidJSON},
		{"k:u2", `[1,2,3]`, event.ReasonInvalidJSON},
		{"k:u2", `{"v":1,"id":"x1","action":"crash","kind":"k","subject":"u2"}`, event.ReasonMissingField},
		{"k:u3", `{"v":2,"id":"x2","action":"crash","kind":"k","subject":"u3","ts":1}`, event.ReasonUnsupportedVersion},
		{"k:u3", `{"v":1,"id":"x3","action":"Crash!","kind":"k","subject":"u3","ts":` + strconv.FormatInt(now.UnixMilli(), 10) + `}`, event.ReasonInvalidField},
		{"k:u4", `{"v":1,"id":"x4","action":"crash","kind":"k","subject":"u4","ts":` + strconv.FormatInt(now.UnixMilli(), 10) + `,"n":0}`, event.ReasonOutOfRange},
		{"k:other", string(valid("u5")), consume.ReasonKeyMismatch},
		{"k:u6", `{"v":1,"id":"x6","action":"crash","kind":"k","subject":"u6","ts":` + strconv.FormatInt(now.Add(time.Hour).UnixMilli(), 10) + `}`, consume.ReasonFutureTimestamp},
	}
	var msgs []kafka.Message
	for i := 0; i < 30; i++ {
		s := subs[i%len(subs)]
		msgs = append(msgs, kafka.Message{Key: []byte("k:" + s), Value: valid(s)})
		e.produced[s]++
		if i < len(poison) {
			msgs = append(msgs, kafka.Message{Key: []byte(poison[i].key), Value: []byte(poison[i].value)})
		}
	}
	writeAll(t, ctx, w, msgs)
	e.waitExact("crash", 60*time.Second)

	// The DLQ holds each poison message once, with its reason and source.
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: e.dlq, Partition: 0, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	want := map[string]string{}
	for _, pm := range poison {
		want[pm.value] = pm.reason
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(want) > 0 {
		m, err := r.ReadMessage(rctx)
		if err != nil {
			t.Fatalf("read DLQ: %v; still missing %v", err, want)
		}
		h := headers(m)
		reason, ok := want[string(m.Value)]
		if !ok {
			t.Fatalf("unexpected DLQ message %q (reason %s)", m.Value, h[consume.HeaderDLQReason])
		}
		if h[consume.HeaderDLQReason] != reason || h[consume.HeaderDLQTopic] != e.topic || h[consume.HeaderDLQOffset] == "" {
			t.Fatalf("DLQ message %q: headers %v, want reason %s from %s", m.Value, h, reason, e.topic)
		}
		delete(want, string(m.Value))
	}

	// A hot subject: 5 events against 3/1m -> one deny record, one decision.
	hot := window.Subject{Action: "hot", Kind: "k", Subject: "h1"}
	for i := 0; i < 5; i++ {
		v, _ := event.Encode(event.Event{ID: event.NewID(), Action: "hot", Kind: "k", Subject: "h1", TS: time.Now()})
		writeAll(t, ctx, w, []kafka.Message{{Key: []byte("k:h1"), Value: v}})
	}
	dr := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: e.decisions, Partition: 0, MaxWait: 200 * time.Millisecond})
	defer dr.Close()
	m, err := dr.ReadMessage(rctx)
	if err != nil {
		t.Fatalf("read decisions: %v", err)
	}
	var d window.DecisionMessage
	if err := json.Unmarshal(m.Value, &d); err != nil {
		t.Fatal(err)
	}
	if d.Subject != "h1" || d.Rule != "hot" || d.Limit.String() != "3/1m" || d.Count < 4 || d.Shadow || d.Until.Before(time.Now()) {
		t.Fatalf("decision %s", m.Value)
	}
	// The decision goes out with the batch that crossed the limit; the
	// fifth event may be in a later batch, so wait for it (bounded).
	var states []window.State
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		states, err = e.store.Check(ctx, time.Now(), []window.Query{{Subject: hot, Windows: []time.Duration{time.Minute}}})
		if err != nil {
			t.Fatal(err)
		}
		if states[0].Sums[0] >= 5 || time.Now().After(deadline) {
			break
		}
	}
	if states[0].Deny == nil || states[0].Deny.Message != "too hot" || states[0].Sums[0] != 5 {
		t.Fatalf("hot subject state: deny %+v sum %v", states[0].Deny, states[0].Sums)
	}
	// Only one decision: later batches re-deny without re-publishing. Once
	// the relay's cursor stands at the stream's last entry, everything the
	// stream holds is on the topic: no wait for "nothing more".
	part := window.Partition(hot, e.partitions)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	for {
		last, err := e.rdb.XRevRangeN(wctx, e.store.Keys().Log(part), "+", "-", 1).Result()
		if err != nil {
			t.Fatal(err)
		}
		cur, err := e.rdb.Get(wctx, e.store.Keys().Relay(part)).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if len(last) == 1 && strings.HasPrefix(cur, last[0].ID+" ") {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("relay cursor %q never reached the last change entry %v", cur, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ends, err := (&kafka.Client{Addr: kafka.TCP(e.brokers...)}).ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{e.decisions: {kafka.LastOffsetOf(0)}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := ends.Topics[e.decisions][0].LastOffset; n != 1 {
		t.Fatalf("%d decisions published, want 1", n)
	}
	p.stop(t)
	metricsOK(t, e)
}

// writeAll writes msgs, retrying only the messages that failed (a fresh
// topic's metadata can lag behind its creation), so each lands exactly once.
// writeAll writes msgs, retrying the failed ones for up to 30 s: a writer's
// metadata cache (kafka-go refreshes it every 6 s) may not know a topic
// created moments ago.
func writeAll(tb testing.TB, ctx context.Context, w *kafka.Writer, msgs []kafka.Message) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := w.WriteMessages(ctx, msgs...)
		if err == nil {
			return
		}
		var failed []kafka.Message
		if werrs, ok := err.(kafka.WriteErrors); ok {
			for i, e := range werrs {
				if e != nil {
					failed = append(failed, msgs[i])
				}
			}
		} else {
			failed = msgs // nothing was written
		}
		if time.Now().After(deadline) {
			tb.Fatalf("produce: %v", err)
		}
		msgs = failed
		time.Sleep(250 * time.Millisecond)
	}
}

func headers(m kafka.Message) map[string]string {
	out := map[string]string{}
	for _, h := range m.Headers {
		out[h.Key] = string(h.Value)
	}
	return out
}

// metricsOK runs a fresh instance and reads /healthz and /metrics.
func metricsOK(t *testing.T, e *liveEnv) {
	t.Helper()
	p := e.start("metrics")
	addr := metricsAddr(t, e, "metrics")
	base := strings.TrimSuffix(addr, "/metrics")
	for path, want := range map[string]string{"/healthz": "ok", "/metrics": "floodgate_live_events_total"} {
		resp, err := httpGet(base + path)
		if err != nil || !strings.Contains(resp, want) {
			t.Fatalf("GET %s: %v; body lacks %q", path, err, want)
		}
	}
	p.stop(t)
}

func httpGet(url string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

const ruleTypesRules = `
rules:
  - name: seen
    action: crash
    kinds: [k]
    distinct: email
    limits: [9999/1d]
  - name: pace
    action: crash
    kinds: [k]
    bucket: {rate: 100/1h, burst: 10000}
`

// TestAggregatorCrashExactlyOnceRuleTypes SIGKILLs the aggregator while
// events with related e-mails flow under a distinct rule and a bucket rule:
// at the end every subject's distinct set holds exactly the e-mails sent for
// it, and its bucket's arrival time is the reference GCRA's over the events
// in partition order — each event applied once.
func TestAggregatorCrashExactlyOnceRuleTypes(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 4, ruleTypesRules)
	ctx := context.Background()
	w := e.writer()
	defer w.Close()
	subs := subjects(12)
	send := func(n, from int) {
		msgs := make([]kafka.Message, 0, n)
		for i := range n {
			s := subs[(from+i)%len(subs)]
			ev := event.Event{ID: event.NewID(), Action: "crash", Kind: "k", Subject: s, TS: time.Now(),
				Attrs: map[string]string{"email": "e" + strconv.Itoa((from+i)%37) + "@example.com"}}
			v, err := event.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, kafka.Message{Key: []byte(ev.Key()), Value: v})
		}
		writeAll(t, ctx, w, msgs)
	}
	sent := 0
	p := e.crashRounds(t, 3, 12, 7, func() {
		send(50, sent)
		sent += 50
	})
	// The reference: the topic as the aggregator reads it, partition by
	// partition in offset order.
	type ref struct {
		emails map[string]bool
		tat    int64
	}
	refs := map[string]*ref{}
	interval := (time.Hour / 100).Microseconds()
	for part, end := range e.logEnds() {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: e.topic, Partition: part, MaxWait: 100 * time.Millisecond})
		for off := int64(0); off < end; {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			off = m.Offset + 1
			ev, err := event.Decode(m.Value)
			if err != nil {
				t.Fatal(err)
			}
			rf := refs[ev.Subject]
			if rf == nil {
				rf = &ref{emails: map[string]bool{}}
				refs[ev.Subject] = rf
			}
			rf.emails[ev.Attrs["email"]] = true
			rf.tat = max(rf.tat, ev.TS.UnixMilli()*1000) + interval
		}
		r.Close()
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		mismatch := ""
		for subj, rf := range refs {
			sub := window.Subject{Action: "crash", Kind: "k", Subject: subj}
			part := window.Partition(sub, e.partitions)
			n, err := e.rdb.ZCard(ctx, e.store.Keys().Distinct(part, sub, "email")).Result()
			if err != nil {
				t.Fatal(err)
			}
			tat, err := e.rdb.HGet(ctx, e.store.Keys().Arrivals(part, sub), "pace").Int64()
			if err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			if n > int64(len(rf.emails)) || tat > rf.tat {
				t.Fatalf("subject %s: %d distinct e-mails and arrival time %d, reference %d and %d: counted twice", subj, n, tat, len(rf.emails), rf.tat)
			}
			if n != int64(len(rf.emails)) || tat != rf.tat {
				mismatch = fmt.Sprintf("subject %s: %d of %d e-mails, arrival time %d of %d", subj, n, len(rf.emails), tat, rf.tat)
			}
		}
		if mismatch == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(mismatch)
		}
		time.Sleep(250 * time.Millisecond)
	}
	p.stop(t)
	e.checkOffsets()
}

// TestAggregatorRefusesMissingOutputTopics: without its dead-letter or
// decisions topic the aggregator would count and then retry those writes
// for ever; it refuses to start instead, naming the topic.
func TestAggregatorRefusesMissingOutputTopics(t *testing.T) {
	e := newLiveEnv(t, 2, countRules)
	e.decisions = e.topic + ".missing"
	p := e.start("agg")
	select {
	case err := <-p.done:
		if err == nil {
			t.Fatal("aggregator exited 0 without its decisions topic")
		}
	case <-time.After(time.Minute):
		t.Fatal("aggregator still running without its decisions topic")
	}
	log, err := os.ReadFile(filepath.Join(e.dir, "agg.log"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "topic " + e.decisions + " does not exist"; !strings.Contains(string(log), want) {
		t.Fatalf("log does not say %q:\n%s", want, log)
	}
}
