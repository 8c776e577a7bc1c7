package history_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
)

// TestBenchmarkHistoryCapacity measures what one PostgreSQL holds of
// history (docs/scaling.md, "History past one PostgreSQL"): the minute
// bucket rows a minute of traffic makes at the seed's 2,000 visits/s and at
// 100 times that, the rows/s the sinks of four partitions write together,
// and the bytes a row costs on disk (table, keys and the BRIN index).
// Gated: FLOODGATE_BENCH=1.
func TestBenchmarkHistoryCapacity(t *testing.T) {
	if os.Getenv("FLOODGATE_BENCH") != "1" {
		t.Skip("set FLOODGATE_BENCH=1 to measure")
	}
	// Rows per minute: one per (link, minute) visited, so what counts is the
	// links visited in a minute, not the visits. Links drawn Zipf (s=1.1)
	// from a million, as short links are.
	for _, rate := range []int{2_000, 200_000} {
		rng := rand.New(rand.NewPCG(1, uint64(rate)))
		z := rand.NewZipf(rng, 1.1, 1, 999_999)
		seen := map[uint64]struct{}{}
		for range rate * 60 {
			seen[z.Uint64()] = struct{}{}
		}
		t.Logf("%d visits/s over 1M Zipf links: %d minute-bucket rows per minute (%.0f rows/s)", rate, len(seen), float64(len(seen))/60)
	}

	pool := historytest.Pool(t)
	ctx := context.Background()
	const parts, batches, per = 4, 15, 10_000
	now := time.Date(2031, 6, 1, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	errs := make(chan error, parts)
	start := time.Now()
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: "capacity"})
			if err != nil {
				errs <- err
				return
			}
			var off int64
			for b := range batches {
				batch := consume.Batch{Topic: "capacity", Partition: p, First: off, Last: off + per - 1}
				minute := now.Add(-24 * time.Hour).Add(time.Duration(b) * time.Minute)
				for i := range per {
					batch.Records = append(batch.Records, consume.Record{Offset: off + int64(i), Event: event.Event{
						ID: "x", Action: "visit", Kind: "link", Subject: fmt.Sprintf("p%d-link-%06d", p, i), TS: minute, N: 1}})
				}
				if err := s.Apply(ctx, batch); err != nil {
					errs <- err
					return
				}
				off += per
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rows := parts * batches * per
	t.Logf("sink, %d partitions in parallel: %d minute-bucket rows in %s: %.0f rows/s", parts, rows, took.Round(time.Millisecond), float64(rows)/took.Seconds())

	var bytes, n int64
	if err := pool.QueryRow(ctx, `
SELECT (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('floodgate.bucket_1m')),
       (SELECT count(*) FROM floodgate.bucket_1m)`).Scan(&bytes, &n); err != nil {
		t.Fatal(err)
	}
	t.Logf("bucket_1m: %d rows, %d bytes with its indexes: %.0f bytes per row", n, bytes, float64(bytes)/float64(n))
}
