package history_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
)

// berlinPool is a pool on the database of url whose sessions run in
// Europe/Berlin, as a server or role configured outside UTC would give.
func berlinPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["timezone"] = "Europe/Berlin"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestPartitionsAndCurveIgnoreSessionTimeZone: partitions are UTC days
// across a DST change and a day-step curve has UTC-midnight points, whatever
// the session's TimeZone.
func TestPartitionsAndCurveIgnoreSessionTimeZone(t *testing.T) {
	pool := historytest.Pool(t)
	berlin := berlinPool(t, pool.Config().ConnString())
	ctx := context.Background()
	fn := func(name string) string { return pgx.Identifier{"floodgate", name}.Sanitize() }

	// Autumn DST change (Europe/Berlin, 2024-10-27): every 1m partition is one
	// UTC day, and the day after the change can be created.
	for d := time.Date(2024, 10, 25, 0, 0, 0, 0, time.UTC); d.Before(time.Date(2024, 10, 30, 0, 0, 0, 0, time.UTC)); d = d.AddDate(0, 0, 1) {
		var lo, hi time.Time
		if err := berlin.QueryRow(ctx, `SELECT lo, hi FROM `+fn("partition_bounds")+`('1m', $1)`, d.Add(13*time.Hour)).Scan(&lo, &hi); err != nil {
			t.Fatal(err)
		}
		if !lo.Equal(d) || hi.Sub(lo) != 24*time.Hour {
			t.Errorf("partition_bounds('1m', %s) = [%s, %s), want the UTC day", d.Format(time.DateOnly), lo.UTC(), hi.UTC())
		}
		if _, err := berlin.Exec(ctx, `SELECT `+fn("ensure_partition")+`('1m', $1)`, d.Add(13*time.Hour)); err != nil {
			t.Fatalf("ensure_partition('1m', %s) in a Europe/Berlin session: %v", d.Format(time.DateOnly), err)
		}
	}
	// Weekly and monthly partitions across the change too.
	for _, step := range []string{"5m", "1h"} {
		for _, at := range []time.Time{time.Date(2024, 10, 20, 12, 0, 0, 0, time.UTC), time.Date(2024, 10, 27, 12, 0, 0, 0, time.UTC), time.Date(2024, 11, 3, 12, 0, 0, 0, time.UTC)} {
			if _, err := berlin.Exec(ctx, `SELECT `+fn("ensure_partition")+`($1, $2)`, step, at); err != nil {
				t.Fatalf("ensure_partition(%s, %s) in a Europe/Berlin session: %v", step, at, err)
			}
		}
	}

	// Spring DST change (2024-03-31): one event a day at 00:30 UTC from the
	// 28th to the 3rd, written and read in Berlin sessions.
	s := newSink(t, berlin)
	first := time.Date(2024, 3, 28, 0, 30, 0, 0, time.UTC)
	b := consume.Batch{Topic: "tz", Partition: 0, First: 0}
	for i := range 7 {
		b.Records = append(b.Records, rec(int64(i), "visit", "ip", "1.2.3.4", first.AddDate(0, 0, i), 1))
	}
	b.Last = int64(len(b.Records) - 1)
	if err := s.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	from := time.Date(2024, 3, 28, 0, 0, 0, 0, time.UTC)
	rows, err := berlin.Query(ctx, `SELECT "time", value FROM `+fn("curve")+`('visit', NULL, $1, $2, interval '1 day')`, from, from.AddDate(0, 0, 7))
	if err != nil {
		t.Fatal(err)
	}
	type point struct {
		t time.Time
		v int64
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (point, error) {
		var p point
		return p, r.Scan(&p.t, &p.v)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 7 {
		t.Fatalf("curve has %d points, want 7: %v", len(got), got)
	}
	for i, p := range got {
		if want := from.AddDate(0, 0, i); !p.t.Equal(want) || p.v != 1 {
			t.Errorf("curve[%d] = %s %d, want %s 1", i, p.t.UTC(), p.v, want)
		}
	}
}
