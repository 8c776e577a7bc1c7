package decide_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/strict"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// testRules: several limits per rule, a shadow rule, an allowlist and a
// strict rule.
const testRules = `
rules:
  - name: login-failed
    action: login_failed
    kinds: [ip, email]
    limits: [5/1m, 10/1h]
    message: Too many failed logins. Try again later.
    allow: [10.0.0.0/8, ops@example.com]
  - name: visit
    action: visit
    kinds: [ip]
    limits: [3/1m]
    shadow: true
    message: Too many visits.
  - name: password-reset
    action: password_reset
    kinds: [email]
    limits: [10/1m, 20/1h]
    strict: true
    message: A reset mail was sent recently.
`

// redisClient is a client with the options the limiter tests need (a large
// pool, context timeouts, fast dials, no retries), closed at the end.
func redisClient(tb testing.TB, addr string) *redis.Client {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: -1})
	tb.Cleanup(func() {
		if err := rdb.Close(); err != nil {
			tb.Error(err)
		}
	})
	return rdb
}

// liveRedis is redisClient over the stack's Redis; the test fails when Redis
// is down (skips under -short), as stacktest decides.
func liveRedis(tb testing.TB) *redis.Client {
	tb.Helper()
	stacktest.Redis(tb)
	return redisClient(tb, stacktest.RedisAddr())
}

// testPartitions is the partition count the limiter tests' stores assume:
// subjects spread over several slots, so requests of several subjects
// cross slots.
const testPartitions = 4

// testStore returns a Store with a key prefix of this test's own, whose keys
// are deleted at the end.
func testStore(tb testing.TB, rdb *redis.Client) *window.Store {
	tb.Helper()
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(tb, rdb), Partitions: func() int { return testPartitions }})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

func mustRules(tb testing.TB, yaml string) *rules.Set {
	tb.Helper()
	set, err := rules.Parse([]byte(yaml))
	if err != nil {
		tb.Fatal(err)
	}
	return set
}

// env is a limiter over the real Redis, answering checks from memory as
// `floodgate limiter` does (a State kept by Sync from the change streams),
// served on loopback ports; apply counts events the way the aggregator does.
type env struct {
	rdb   *redis.Client
	store *window.Store
	ap    *live.Applier
	set   *rules.Set
	state *decide.State
	lim   *decide.Limiter
	srv   *decide.Server
	pub   *recorder
	calls *countingStore
	offs  map[int]int64
	room  map[int]*live.Headroom
}

type envOpt func(*decide.Config, *decide.ServerConfig)

func newEnv(tb testing.TB, opts ...envOpt) *env {
	tb.Helper()
	e := &env{rdb: liveRedis(tb), pub: &recorder{}, offs: map[int]int64{}, room: map[int]*live.Headroom{}}
	e.store = testStore(tb, e.rdb)
	ap, err := live.NewApplier(e.store, live.ApplierConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	e.ap = ap
	e.set = mustRules(tb, testRules)
	e.calls = &countingStore{Store: e.store}
	e.state = decide.NewState()
	taker, err := strict.New(strict.Config{Store: e.store})
	if err != nil {
		tb.Fatal(err)
	}
	parts := func() int { return testPartitions }
	cfg := decide.Config{Store: e.calls, Taker: taker, State: e.state, Partitions: parts,
		Rules: func() *rules.Set { return e.set }, Publisher: e.pub,
		// Functional tests share a loaded 2-core machine: the 50ms default
		// is for production; TestFailureModeWithinTimeout tests it.
		Timeout: 2 * time.Second}
	scfg := decide.ServerConfig{HTTPAddr: "127.0.0.1:0", RLSAddr: "127.0.0.1:0"}
	for _, o := range opts {
		o(&cfg, &scfg)
	}
	e.state = cfg.State
	lim, err := decide.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	e.lim = lim
	ctx, cancel := context.WithCancel(context.Background())
	synced := make(chan error, 1)
	go func() {
		synced <- decide.Sync(ctx, decide.SyncConfig{State: e.state, Source: e.store, Streams: e.rdb, Partitions: parts})
	}()
	tb.Cleanup(func() {
		cancel()
		if err := <-synced; err != nil {
			tb.Error(err)
		}
	})
	waitFor(tb, "the state to load", func() bool { return lim.Ready(context.Background()) == nil })
	scfg.Limiter = lim
	srv, err := decide.NewServer(scfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			tb.Error(err)
		}
	})
	e.srv = srv
	return e
}

// waitFor waits for cond (stacktest.WaitFor) at most 10 s.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	stacktest.WaitFor(tb, what, 10*time.Second, cond)
}

// apply counts n events of a subject at ts through the aggregator's own
// write path and waits until the limiter's state has them (applyTo).
func (e *env) apply(tb testing.TB, action, kind, subject string, n int, ts time.Time) {
	tb.Helper()
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = event.Event{V: 1, ID: event.NewID(), Action: action, Kind: kind, Subject: subject, TS: ts, N: 1}
	}
	e.applyTo(tb, window.Partition(window.Subject{Action: action, Kind: kind, Subject: subject}, testPartitions), evs, ts)
}

// applyTo applies evs as one batch of partition p at now (live
// Applier.Apply with a headroom per partition, as the live sink keeps), and
// waits until the limiter's state has the batch's changes.
func (e *env) applyTo(tb testing.TB, p int, evs []event.Event, now time.Time) {
	tb.Helper()
	if e.room[p] == nil {
		e.room[p] = live.NewHeadroom(1000)
	}
	b := consume.Batch{Topic: "t", Partition: p, First: e.offs[p]}
	for _, ev := range evs {
		b.Records = append(b.Records, consume.Record{Offset: e.offs[p], Event: ev})
		e.offs[p]++
	}
	b.Last = e.offs[p] - 1
	res, err := e.ap.Apply(context.Background(), "test", b, e.set, now, e.room[p])
	if err != nil {
		tb.Fatal(err)
	}
	if res.Changes > 0 {
		waitFor(tb, "the state to catch up", func() bool { return e.state.Seq(p) >= res.Changes })
	}
}

// countingStore counts the round trips of exact checks.
type countingStore struct {
	decide.Store
	n atomic.Int64
}

func (c *countingStore) Evaluate(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64) ([]window.EvalState, error) {
	c.n.Add(1)
	return c.Store.Evaluate(ctx, now, qs, n)
}

// recorder keeps published events in memory (the end-to-end test uses the
// real producer).
type recorder struct {
	mu             sync.Mutex
	plain, counted []event.Event
}

func (r *recorder) Publish(_ context.Context, evs ...event.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plain = append(r.plain, evs...)
	return nil
}

func (r *recorder) PublishCounted(_ context.Context, evs ...event.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counted = append(r.counted, evs...)
	return nil
}

// counted is the strict takes' counted events: those the limiter published
// itself and those it queued in the slots' take streams, for the partition
// owner's relay to publish.
func (e *env) counted(tb testing.TB) []event.Event {
	tb.Helper()
	e.pub.mu.Lock()
	out := slices.Clone(e.pub.counted)
	e.pub.mu.Unlock()
	for p := range testPartitions {
		entries, err := e.rdb.XRange(context.Background(), e.store.Keys().Takes(p), "-", "+").Result()
		if err != nil {
			tb.Fatal(err)
		}
		for _, m := range entries {
			for _, v := range m.Values {
				_, value, err := window.ParseQueuedEvent(v.(string))
				if err != nil {
					tb.Fatal(err)
				}
				ev, err := event.Decode(value)
				if err != nil {
					tb.Fatal(err)
				}
				out = append(out, ev)
			}
		}
	}
	return out
}

// h2cClient speaks HTTP/2 without TLS, as plain gRPC clients do.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

type rulesSet = rules.Set

// testStoreNoCleanup is a Store over a Redis that is not there.
func testStoreNoCleanup(tb testing.TB, rdb *redis.Client) *window.Store {
	tb.Helper()
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: "fglim-dead", Partitions: func() int { return testPartitions }})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// writerOf returns the operator's Writer over st.
func writerOf(tb testing.TB, st *window.Store) *operator.Writer {
	tb.Helper()
	w, err := operator.NewWriter(st)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}
