package feed_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/feed"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// recorder is a feed.Handler that keeps what it was told.
type recorder struct {
	gate    chan struct{} // when set, the first Apply waits for it
	held    atomic.Bool
	once    sync.Once
	mu      sync.Mutex
	resets  int
	seqs    []int64
	subject map[window.Subject]*window.SubjectState
}

func (r *recorder) Reset(_ int, snap window.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resets++
	r.subject = map[window.Subject]*window.SubjectState{}
	for sub, st := range snap.States {
		r.subject[sub] = &st
	}
}

func (r *recorder) Apply(_ int, c window.Change) {
	if r.gate != nil {
		r.once.Do(func() {
			r.held.Store(true)
			<-r.gate
		})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seqs = append(r.seqs, c.Seq)
	for _, sc := range c.States {
		r.subject[sc.Subject] = sc.State
	}
}

func (r *recorder) snapshot() (resets int, seqs []int64, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resets, append([]int64(nil), r.seqs...), len(r.subject)
}

// waitFor waits for cond (stacktest.WaitFor) at most 10 s.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	stacktest.WaitFor(tb, what, 10*time.Second, cond)
}

type fixture struct {
	rdb   *redis.Client
	store *window.Store
	ap    *live.Applier
	set   *rules.Set
	next  int64
}

func newFixture(t *testing.T) *fixture {
	rdb := stacktest.Redis(t)
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: func() int { return 1 }})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse([]byte("rules:\n  - name: r\n    action: a\n    kinds: [ip]\n    limits: [2/1h]\n"))
	if err != nil {
		t.Fatal(err)
	}
	ap, err := live.NewApplier(st, live.ApplierConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{rdb: rdb, store: st, ap: ap, set: set}
}

// deny counts two events of a new subject: one change entry.
func (f *fixture) deny(t *testing.T, ip string) {
	t.Helper()
	now := time.Now()
	b := consume.Batch{Topic: "t", First: f.next, Last: f.next + 1}
	for i := range 2 {
		b.Records = append(b.Records, consume.Record{Offset: f.next + int64(i), Event: event.Event{
			V: 1, ID: event.NewID(), Action: "a", Kind: "ip", Subject: ip, TS: now, N: 1}})
	}
	f.next += 2
	res, err := f.ap.Apply(context.Background(), "g", b, f.set, now, nil)
	if err != nil || res.Changes == 0 {
		t.Fatalf("apply: %+v %v", res, err)
	}
}

// A follower whose next entries are gone (a trim of a lagging reader, a
// failover) loads a new snapshot and goes on; one following from a cursor
// reports the gap.
func TestFollowerResyncsOrReportsAGap(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The snapshot follower starts on an empty partition and is held in its
	// first Apply while entries 2 and 3 come and go.
	gate := make(chan struct{})
	snap := &recorder{gate: gate}
	go func() {
		_ = feed.Follow(ctx, feed.Config{Source: f.store, Streams: f.rdb, Partition: 0, Handler: snap, Block: 50 * time.Millisecond})
	}()
	waitFor(t, "the first snapshot", func() bool { r, _, _ := snap.snapshot(); return r == 1 })
	f.deny(t, "192.0.2.1")
	waitFor(t, "the follower to hold entry 1", func() bool { return snap.held.Load() })
	f.deny(t, "192.0.2.2")
	f.deny(t, "192.0.2.3")
	msgs, err := f.rdb.XRange(context.Background(), f.store.Keys().Log(0), "-", "+").Result()
	if err != nil || len(msgs) != 3 {
		t.Fatalf("stream: %d entries, %v", len(msgs), err)
	}
	for _, m := range msgs[1:] {
		if err := f.rdb.XDel(context.Background(), f.store.Keys().Log(0), m.ID).Err(); err != nil {
			t.Fatal(err)
		}
	}
	f.deny(t, "192.0.2.4")
	close(gate)
	waitFor(t, "a second snapshot with all four subjects", func() bool { r, _, n := snap.snapshot(); return r == 2 && n == 4 })

	// From a cursor before entry 1: 1, then 4; 2 and 3 reported lost.
	gaps := make(chan [2]int64, 1)
	cursor := &recorder{subject: map[window.Subject]*window.SubjectState{}}
	go func() {
		_ = feed.Follow(ctx, feed.Config{Source: f.store, Streams: f.rdb, Partition: 0, Handler: cursor, From: "0-0", Block: 50 * time.Millisecond,
			OnGap: func(_ int, want, got int64) { gaps <- [2]int64{want, got} }})
	}()
	select {
	case g := <-gaps:
		if g != [2]int64{2, 4} {
			t.Fatalf("gap %v, want seq 2 expected and 4 read", g)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no gap reported")
	}
	waitFor(t, "the cursor follower to read entry 4", func() bool { _, s, _ := cursor.snapshot(); return len(s) == 2 && s[1] == 4 })
}

// An unreadable entry is not skipped silently: the follower takes it as a
// gap (and a snapshot follower reloads).
func TestFollowerTreatsAnUnreadableEntryAsAGap(t *testing.T) {
	f := newFixture(t)
	f.deny(t, "192.0.2.1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &recorder{}
	m, err := feed.NewMetrics(nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = feed.Follow(ctx, feed.Config{Source: f.store, Streams: f.rdb, Partition: 0, Handler: r, Block: 50 * time.Millisecond, Metrics: m})
	}()
	waitFor(t, "the snapshot", func() bool { n, _, _ := r.snapshot(); return n == 1 })
	if err := f.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: f.store.Keys().Log(0), Values: []string{"q", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a second snapshot", func() bool { n, _, _ := r.snapshot(); return n == 2 })
}
