package history_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// clock is a settable time for the dedup horizon.
type clock struct{ ns atomic.Int64 }

func (c *clock) set(t time.Time) { c.ns.Store(t.UnixNano()) }
func (c *clock) now() time.Time  { return time.Unix(0, c.ns.Load()).UTC() }

func dedupSink(t *testing.T, db history.DB, c *clock, reg prometheus.Registerer) *history.Sink {
	t.Helper()
	s, err := history.NewSink(context.Background(), history.SinkConfig{
		DB: db, Group: "test-dedup",
		Visitors: history.Visitors{"visit": "ip"}, Dedup: 10 * time.Minute, Now: c.now, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ev is a visit of link l by ip with the given id.
func ev(off int64, id, l, ip string, ts time.Time, n int64) consume.Record {
	return consume.Record{Offset: off, Event: event.Event{V: 1, ID: id, Action: "visit", Kind: "link", Subject: l, TS: ts, N: n,
		Attrs: map[string]string{"ip": ip}}}
}

// TestSinkDedup applies events whose ids repeat within one batch, across
// batches, across a new sink on the same store (a restart), across
// partitions, in refused batches and past the horizon, and checks that each
// id counts once within the horizon: totals, buckets, visitors and metrics.
func TestSinkDedup(t *testing.T) {
	pool := historytest.Pool(t)
	ctx := context.Background()
	c := &clock{}
	c0 := time.Date(2030, 5, 6, 7, 0, 0, 0, time.UTC)
	c.set(c0)
	reg := prometheus.NewRegistry()
	s := dedupSink(t, pool, c, reg)
	q := history.NewQuerier(pool)
	ts := c0.Add(-30 * time.Second) // every event's time: one minute bucket
	link := history.Key{Action: "visit", Kind: "link", Subject: "a"}
	apply := func(s *history.Sink, b consume.Batch) {
		t.Helper()
		if err := s.Apply(ctx, b); err != nil {
			t.Fatalf("apply [%d, %d]: %v", b.First, b.Last, err)
		}
	}
	expect := func(step string, total, visitors int64) {
		t.Helper()
		got, err := q.Total(ctx, link)
		if err != nil {
			t.Fatal(err)
		}
		inBuckets, err := q.Count(ctx, link, ts.Add(-time.Hour), ts.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		vis, err := q.TotalVisitors(ctx, link)
		if err != nil {
			t.Fatal(err)
		}
		if got != total || inBuckets != total || vis != visitors {
			t.Fatalf("%s: total %d, in buckets %d, visitors %d; want %d, %d, %d", step, got, inBuckets, vis, total, total, visitors)
		}
	}

	// One batch: A twice (the second a retry carrying another ip: neither
	// counted nor a visitor), B, C with n = 3.
	apply(s, consume.Batch{Topic: "t", Partition: 0, First: 0, Last: 3, Records: []consume.Record{
		ev(0, "A", "a", "10.0.0.1", ts, 1), ev(1, "A", "a", "10.0.0.9", ts, 1),
		ev(2, "B", "a", "10.0.0.2", ts, 1), ev(3, "C", "a", "10.0.0.2", ts, 3),
	}})
	expect("one batch", 5, 2)

	// Across batches: B again, D new. Replayed: a no-op.
	b2 := consume.Batch{Topic: "t", Partition: 0, First: 4, Last: 5, Records: []consume.Record{
		ev(4, "B", "a", "10.0.0.2", ts, 1), ev(5, "D", "a", "10.0.0.3", ts, 1),
	}}
	apply(s, b2)
	apply(s, b2)
	expect("across batches", 6, 3)

	// A gap is refused, and records nothing: X counts when its turn comes.
	var conflict *history.OffsetConflictError
	if err := s.Apply(ctx, consume.Batch{Topic: "t", Partition: 0, First: 20, Last: 20, Records: []consume.Record{
		ev(20, "X", "a", "10.0.0.4", ts, 1)}}); !errors.As(err, &conflict) {
		t.Fatalf("gap: err %v, want OffsetConflictError", err)
	}

	// A restart: a new sink on the same store, five minutes later. A again
	// (a duplicate), E new.
	c.set(c0.Add(5 * time.Minute))
	reg2 := prometheus.NewRegistry()
	s2 := dedupSink(t, pool, c, reg2)
	apply(s2, consume.Batch{Topic: "t", Partition: 0, First: 6, Last: 7, Records: []consume.Record{
		ev(6, "A", "a", "10.0.0.1", ts, 1), ev(7, "E", "a", "10.0.0.5", ts, 1),
	}})
	expect("after a restart", 7, 4)

	// A stale owner's batch overlapping the stored offset: only offset 8 on
	// is applied; the X of its head is not recorded.
	apply(s, consume.Batch{Topic: "t", Partition: 0, First: 6, Last: 8, Records: []consume.Record{
		ev(6, "X", "a", "10.0.0.4", ts, 1), ev(8, "F", "a", "10.0.0.6", ts, 1),
	}})
	expect("trimmed", 8, 5)
	apply(s2, consume.Batch{Topic: "t", Partition: 0, First: 9, Last: 9, Records: []consume.Record{
		ev(9, "X", "a", "10.0.0.4", ts, 1)}})
	expect("an id of refused batches", 9, 6)

	// Another partition: an id is counted once whichever partition brings
	// it (ids are unique per event; a retry has the same key anyway).
	apply(s2, consume.Batch{Topic: "t", Partition: 1, First: 0, Last: 1, Records: []consume.Record{
		ev(0, "C", "a", "10.0.0.2", ts, 3), ev(1, "G", "a", "10.0.0.7", ts, 1)}})
	expect("another partition", 10, 7)

	// The horizon: at c0 + 10m, A (counted at c0) counts again; E (counted
	// at c0 + 5m) does not.
	c.set(c0.Add(10 * time.Minute))
	apply(s2, consume.Batch{Topic: "t", Partition: 0, First: 10, Last: 11, Records: []consume.Record{
		ev(10, "A", "a", "10.0.0.1", ts, 1), ev(11, "E", "a", "10.0.0.5", ts, 1)}})
	expect("past the horizon", 11, 7)

	// Pruning deletes exactly the ids counted at or before now - horizon:
	// B, C, D (c0); A was counted again at c0 + 10m.
	n, err := s2.Prune(ctx)
	if err != nil || n != 3 {
		t.Fatalf("Prune = %d, %v; want 3", n, err)
	}
	var left []string
	rows, err := pool.Query(ctx, `SELECT id::text FROM `+pgx.Identifier{"floodgate", "history_ids"}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, id := range []string{"A", "B", "C", "D", "E", "F", "G", "X"} {
		k := history.IDKey(id)
		names[fmt.Sprintf("%x-%x-%x-%x-%x", k[0:4], k[4:6], k[6:8], k[8:10], k[10:16])] = id
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left = append(left, names[k])
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	if fmt.Sprint(left) != "[A E F G X]" {
		t.Fatalf("ids left after pruning %v, want [A E F G X]", left)
	}

	// Events (sum of n) by result, of each sink.
	for _, c := range []struct {
		reg    *prometheus.Registry
		result string
		want   float64
	}{
		{reg, "applied", 5 + 1 + 1}, {reg, "duplicate", 1 + 1},
		{reg2, "applied", 1 + 1 + 1 + 1}, {reg2, "duplicate", 1 + 3 + 1},
	} {
		if got := counter(t, c.reg, "floodgate_history_events_total", c.result); got != c.want {
			t.Errorf("floodgate_history_events_total{result=%q} = %v, want %v", c.result, got, c.want)
		}
	}
}

// counter returns the value of a registered counter with label result.
func counter(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{result=%q}", name, result)
	return 0
}

// TestIDKeyMatchesSQL: the sink's key of an event id is the SQL function's.
func TestIDKeyMatchesSQL(t *testing.T) {
	pool := historytest.Pool(t)
	for _, id := range []string{"A", event.NewID(), "0b7e5c1d2f3a4b5c", "~!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}"} {
		var got [16]byte
		if err := pool.QueryRow(context.Background(), `SELECT `+pgx.Identifier{"floodgate", "history_id"}.Sanitize()+`($1)`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := history.IDKey(id); got != want {
			t.Errorf("history_id(%q) = %x, IDKey = %x", id, got, want)
		}
	}
}

// TestSinkDedupRacingOwners has two sinks (a stale owner and the new one)
// apply the same batches of one partition concurrently, each retrying
// nothing it was told was stored: every id counts once, and no batch fails.
// Ids repeat within and across batches.
func TestSinkDedupRacingOwners(t *testing.T) {
	pool := historytest.Pool(t)
	ctx := context.Background()
	c := &clock{}
	c.set(time.Now())
	ts := time.Now().Truncate(time.Minute)
	const batches, per = 40, 50
	var all []consume.Record
	distinct := map[string]bool{}
	for i := range batches * per {
		id := fmt.Sprintf("id-%d", i*7%(batches*per/2)) // each id about twice
		distinct[id] = true
		all = append(all, ev(int64(i), id, fmt.Sprintf("l%d", i%5), "10.0.0.1", ts, 1))
	}
	var wg sync.WaitGroup
	for o := range 2 {
		s := dedupSink(t, pool, c, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := 0; first < len(all); {
				// The owners cut batches differently, so they overlap.
				size := per + o*17
				last := min(first+size, len(all)) - 1
				b := consume.Batch{Topic: "t", Partition: 0, First: int64(first), Last: int64(last), Records: all[first : last+1]}
				if err := s.Apply(ctx, b); err != nil {
					t.Errorf("owner %d: apply [%d, %d]: %v", o, first, last, err)
					return
				}
				first = last + 1
			}
		}()
	}
	wg.Wait()
	var total int64
	if err := pool.QueryRow(ctx, `SELECT sum(n)::bigint FROM `+pgx.Identifier{"floodgate", "history_totals"}.Sanitize()).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != int64(len(distinct)) {
		t.Fatalf("history counted %d events, %d distinct ids", total, len(distinct))
	}
}

// TestSinkPrunesInTheBackground: RunPartition (which consume.Group runs
// beside every partition it owns) deletes the ids past the horizon, and
// only those.
func TestSinkPrunesInTheBackground(t *testing.T) {
	pool := historytest.Pool(t)
	ctx := context.Background()
	c := &clock{}
	c0 := time.Date(2030, 5, 6, 7, 0, 0, 0, time.UTC)
	c.set(c0)
	s, err := history.NewSink(ctx, history.SinkConfig{
		DB: pool, Group: "test-prune",
		Dedup: 2 * time.Second, Now: c.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	var recs []consume.Record
	for i := range 25 {
		recs = append(recs, ev(int64(i), fmt.Sprintf("old-%d", i), "a", "10.0.0.1", c0, 1))
	}
	if err := s.Apply(ctx, consume.Batch{Topic: "t", Partition: 0, First: 0, Last: 24, Records: recs}); err != nil {
		t.Fatal(err)
	}
	c.set(c0.Add(2 * time.Second)) // the old ids are past the horizon now
	if err := s.Apply(ctx, consume.Batch{Topic: "t", Partition: 0, First: 25, Last: 25, Records: []consume.Record{
		ev(25, "new", "a", "10.0.0.1", c0, 1)}}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.RunPartition(rctx, "t", 0); close(done) }()
	defer func() { cancel(); <-done }()
	ids := pgx.Identifier{"floodgate", "history_ids"}.Sanitize()
	stacktest.WaitFor(t, "the ids past the horizon pruned (1 left)", 30*time.Second, func() bool {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+ids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	var left [16]byte
	if err := pool.QueryRow(ctx, `SELECT id FROM `+ids).Scan(&left); err != nil || left != history.IDKey("new") {
		t.Fatalf("id left %x, %v; want IDKey(new)", left, err)
	}
}
