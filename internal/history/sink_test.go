package history_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
)

func newSink(t *testing.T, db history.DB) *history.Sink {
	t.Helper()
	s, err := history.NewSink(context.Background(), history.SinkConfig{
		DB: db, Group: "test-history",
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rec(off int64, action, kind, subject string, ts time.Time, n int64) consume.Record {
	return consume.Record{Offset: off, Event: event.Event{V: 1, ID: event.NewID(), Action: action, Kind: kind, Subject: subject, TS: ts, N: n}}
}

func TestSinkAppliesOnce(t *testing.T) {
	pool := historytest.Pool(t)
	ctx := context.Background()
	s := newSink(t, pool)
	q := history.NewQuerier(pool)

	if _, ok, err := s.Resume(ctx, "t", 3); err != nil || ok {
		t.Fatalf("Resume on an empty store = ok %v, err %v; want not ok", ok, err)
	}
	t0 := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	b1 := consume.Batch{Topic: "t", Partition: 3, First: 10, Last: 14, Records: []consume.Record{
		rec(10, "visit", "ip", "1.2.3.4", t0, 1),
		rec(11, "visit", "ip", "1.2.3.4", t0.Add(20*time.Second), 2), // same minute
		rec(12, "visit", "ip", "1.2.3.4", t0.Add(time.Minute), 1),
		rec(14, "visit", "email", "a@x", t0, 5), // offset 13 was skipped (malformed)
	}}
	if err := s.Apply(ctx, b1); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, b1); err != nil { // replay: a no-op
		t.Fatalf("replay: %v", err)
	}
	if next, ok, err := s.Resume(ctx, "t", 3); err != nil || !ok || next != 15 {
		t.Fatalf("Resume = %d, %v, %v; want 15", next, ok, err)
	}
	// A stale owner's batch that overlaps the stored offset: only its records
	// from the stored offset on are applied (the head is already stored), so
	// the partition does not stall.
	stale := consume.Batch{Topic: "t", Partition: 3, First: 12, Last: 18, Records: []consume.Record{
		rec(12, "visit", "ip", "1.2.3.4", t0, 100),
		rec(14, "visit", "email", "a@x", t0, 100),
		rec(16, "visit", "ip", "1.2.3.4", t0.Add(2*time.Minute), 1),
	}}
	if err := s.Apply(ctx, stale); err != nil {
		t.Fatalf("overlapping batch: %v", err)
	}
	if next, _, _ := s.Resume(ctx, "t", 3); next != 19 {
		t.Fatalf("after overlapping batch next = %d, want 19", next)
	}
	if err := s.Apply(ctx, stale); err != nil { // and replayed: a no-op
		t.Fatalf("overlapping batch replayed: %v", err)
	}
	// A gap is refused.
	var conflict *history.OffsetConflictError
	gap := consume.Batch{Topic: "t", Partition: 3, First: 30, Last: 30, Records: []consume.Record{rec(30, "visit", "ip", "1.2.3.4", t0, 100)}}
	if err := s.Apply(ctx, gap); !errors.As(err, &conflict) || conflict.Stored != 19 {
		t.Fatalf("gap: err %v, want OffsetConflictError stored 19", err)
	}
	// An empty batch (all skipped) still advances.
	if err := s.Apply(ctx, consume.Batch{Topic: "t", Partition: 3, First: 19, Last: 20}); err != nil {
		t.Fatal(err)
	}
	if next, _, _ := s.Resume(ctx, "t", 3); next != 21 {
		t.Fatalf("after empty batch next = %d, want 21", next)
	}
	// A batch whose First is the stored offset but whose first record comes
	// later (Kafka skipped offsets) and one overlapping it with no record at
	// or after the stored offset.
	if err := s.Apply(ctx, consume.Batch{Topic: "t", Partition: 3, First: 21, Last: 23, Records: []consume.Record{
		rec(23, "visit", "email", "a@x", t0, 1)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, consume.Batch{Topic: "t", Partition: 3, First: 20, Last: 25, Records: []consume.Record{
		rec(20, "visit", "email", "a@x", t0, 100), rec(22, "visit", "email", "a@x", t0, 100)}}); err != nil {
		t.Fatal(err)
	}
	if next, _, _ := s.Resume(ctx, "t", 3); next != 26 {
		t.Fatalf("after trimmed-to-empty batch next = %d, want 26", next)
	}

	ip := history.Key{Action: "visit", Kind: "ip", Subject: "1.2.3.4"}
	for _, c := range []struct {
		name string
		k    history.Key
		want int64
	}{
		{"ip", ip, 5},
		{"email", history.Key{Action: "visit", Subject: "a@x"}, 6},
		{"action", history.Key{Action: "visit"}, 11},
		{"kind", history.Key{Action: "visit", Kind: "email"}, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := q.Count(ctx, c.k, t0.Add(-time.Hour), t0.Add(time.Hour))
			if err != nil || got != c.want {
				t.Errorf("Count = %d, %v; want %d", got, err, c.want)
			}
			if c.k.Kind == "" || c.k.Subject != "" {
				tot, err := q.Total(ctx, c.k)
				if err != nil || tot != c.want {
					t.Errorf("Total = %d, %v; want %d", tot, err, c.want)
				}
			}
		})
	}
	curve, err := q.Curve(ctx, ip, t0.Truncate(time.Minute), t0.Truncate(time.Minute).Add(3*time.Minute), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{3, 1, 1}
	if len(curve) != len(want) {
		t.Fatalf("curve = %v, want values %v", curve, want)
	}
	for i, p := range curve {
		if p.Value != want[i] || !p.Time.Equal(t0.Truncate(time.Minute).Add(time.Duration(i)*time.Minute)) {
			t.Errorf("curve[%d] = %v, want %d at +%dm", i, p, want[i], i)
		}
	}
	top, err := q.Top(ctx, "visit", "", t0.Add(-time.Hour), t0.Add(time.Hour), 10)
	if err != nil || len(top) != 2 || top[0].Subject != "a@x" || top[0].Value != 6 || top[1].Value != 5 {
		t.Fatalf("Top = %v, %v", top, err)
	}
}

// Backdated events, one per distinct day years back, cost no 1m partition
// each: only days the 1m tier keeps (its horizon back from now) get one;
// the rest are counted all the same.
func TestSinkBackdatedDaysCreateNoPartitions(t *testing.T) {
	pool := historytest.Pool(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	s, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: "test-history", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	partitions := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM floodgate.partitions('1m')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := partitions()
	b := consume.Batch{Topic: "t", Partition: 0, First: 0}
	const days = 300
	for i := range days {
		b.Records = append(b.Records, rec(int64(i), "visit", "ip", "192.0.2.1", now.Add(-time.Duration(i)*24*time.Hour), 1))
	}
	b.Last = days - 1
	if err := s.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	// The default ladder's 1m tier keeps 2 days: today, and the two days
	// before (the oldest partly).
	if got := partitions() - before; got > 3 {
		t.Errorf("%d 1m partitions created for %d backdated days, want at most 3", got, days)
	}
	total, err := history.NewQuerier(pool).Total(ctx, history.Key{Action: "visit", Kind: "ip", Subject: "192.0.2.1"})
	if err != nil || total != days {
		t.Errorf("total = %d, %v; want %d", total, err, days)
	}
}
