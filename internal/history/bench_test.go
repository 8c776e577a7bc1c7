package history_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/retention"
)

// TestBenchmarkHistory measures the figures of docs/benchmarks.md
// (## History). Gated: FLOODGATE_BENCH=1 go test ./history -run Benchmark -v
func TestBenchmarkHistory(t *testing.T) {
	if os.Getenv("FLOODGATE_BENCH") != "1" {
		t.Skip("set FLOODGATE_BENCH=1 to measure")
	}
	pool := historytest.Pool(t)
	ctx := context.Background()
	s, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2031, 6, 1, 0, 0, 0, 0, time.UTC)

	// 1. Sink: batches of 10000 events over 5000 keys and 2 minutes each,
	// i.e. 10000 distinct minute buckets per batch, one statement each.
	const batches, per = 60, 10000
	var off int64
	var rows int64
	start := time.Now()
	for b := 0; b < batches; b++ {
		batch := consume.Batch{Topic: "bench", Partition: 0, First: off, Last: off + per - 1}
		minute := now.Add(-48 * time.Hour).Add(time.Duration(b) * 2 * time.Minute)
		for i := 0; i < per; i++ {
			batch.Records = append(batch.Records, consume.Record{Offset: off + int64(i), Event: event.Event{
				ID: "x", Action: "visit", Kind: "ip", Subject: fmt.Sprintf("key-%05d", i%5000),
				TS: minute.Add(time.Duration(i/5000) * time.Minute), N: 1}})
		}
		if err := s.Apply(ctx, batch); err != nil {
			t.Fatal(err)
		}
		off += per
		rows += per
	}
	sinkTook := time.Since(start)
	t.Logf("sink: %d bucket rows in %d batches in %s: %.0f rows/s, %.1f ms/batch",
		rows, batches, sinkTook.Round(time.Millisecond), float64(rows)/sinkTook.Seconds(), float64(sinkTook.Milliseconds())/batches)

	// 2. Roller: move all of it 1m → 5m → 1h.
	l, _ := history.ParseLadder("1m:1h,5m:2h,1h:forever")
	r, err := retention.New(retention.Config{Pool: pool, Ladder: l, Now: func() time.Time { return now.Add(10 * 24 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rollTook := time.Since(start)
	t.Logf("roller: %d rows moved in %s: %.0f rows/s (%+v)", rep.RowsMoved(), rollTook.Round(time.Millisecond), float64(rep.RowsMoved())/rollTook.Seconds(), rep.Tiers)

	// 3. A one-year curve for one key among 100k keys. The key has the
	// default ladder's full density (2 days of minutes, 12 days of 5
	// minutes, the rest of the year hourly); 100k other keys have 20
	// scattered rows each.
	qs := func(name string) string { return pgx.Identifier{"floodgate", name}.Sanitize() }
	for _, st := range []string{"1m", "5m", "1h"} {
		if _, err := pool.Exec(ctx, `DELETE FROM `+qs("bucket_"+st)); err != nil {
			t.Fatal(err)
		}
	}
	y := now.Add(-365 * 24 * time.Hour)
	// Each statement with its own arguments: now, a year ago (y), or both.
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`SELECT ` + qs("ensure_partition") + `('1m', d) FROM generate_series($1::timestamptz - interval '3 days', $1, interval '1 day') d`, []any{now}},
		{`SELECT ` + qs("ensure_partition") + `('5m', d) FROM generate_series($1::timestamptz - interval '15 days', $1, interval '7 days') d`, []any{now}},
		{`SELECT ` + qs("ensure_partition") + `('1h', d) FROM generate_series($2::timestamptz, $1::timestamptz, interval '1 month') d`, []any{now, y}},
		{`INSERT INTO ` + qs("bucket_1m") + ` SELECT 'visit', 'hot', 'ip', b, 3 FROM generate_series($1::timestamptz - interval '2 days', $1 - interval '1 minute', interval '1 minute') b`, []any{now}},
		{`INSERT INTO ` + qs("bucket_5m") + ` SELECT 'visit', 'hot', 'ip', b, 7 FROM generate_series($1::timestamptz - interval '14 days', $1 - interval '2 days 5 minutes', interval '5 minutes') b`, []any{now}},
		{`INSERT INTO ` + qs("bucket_1h") + ` SELECT 'visit', 'hot', 'ip', b, 11 FROM generate_series($2::timestamptz, $1::timestamptz - interval '14 days 1 hour', interval '1 hour') b`, []any{now, y}},
		{`INSERT INTO ` + qs("bucket_1h") + ` SELECT 'visit', 'key-' || k, 'ip', $1::timestamptz + (((k * 7919 + j * 104729) % 8400) * interval '1 hour'), 1
			FROM generate_series(1, 100000) k, generate_series(1, 20) j ON CONFLICT DO NOTHING`, []any{y}},
	} {
		if _, err := pool.Exec(ctx, st.sql, st.args...); err != nil {
			t.Fatalf("%s: %v", st.sql, err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE `+qs("bucket_1m")+`, `+qs("bucket_5m")+`, `+qs("bucket_1h")); err != nil {
		t.Fatal(err)
	}
	q := history.NewQuerier(pool)
	measure := func(step time.Duration) (time.Duration, int) {
		var lat []time.Duration
		var points int
		for i := 0; i < 21; i++ {
			st := time.Now()
			c, err := q.Curve(ctx, history.Key{Action: "visit", Kind: "ip", Subject: "hot"}, y, now, step)
			if err != nil {
				t.Fatal(err)
			}
			lat = append(lat, time.Since(st))
			points = len(c)
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return lat[len(lat)/2], points
	}
	for _, step := range []time.Duration{24 * time.Hour, time.Hour} {
		med, points := measure(step)
		t.Logf("one-year curve, step %s, one key among 100k (2M other rows): median %s (%d points)", step, med.Round(10*time.Microsecond), points)
	}
	var lat []time.Duration
	for i := 0; i < 21; i++ {
		st := time.Now()
		if _, err := q.Total(ctx, history.Key{Action: "visit", Kind: "ip", Subject: "key-77"}); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(st))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("total (one indexed read): median %s", lat[len(lat)/2].Round(10*time.Microsecond))
}
