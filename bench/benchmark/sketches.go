package benchmark

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/retention"
	"github.com/floodgate-dev/floodgate/migrations"
)

// SketchRun is the history sink and the roller on the same synthetic visits,
// with or without unique-visitor sketches (docs/history.md), each in a
// database of its own.
type SketchRun struct {
	Visitors bool
	SinkRows int64 // bucket rows written by the sink
	SinkTook time.Duration
	RollRows int64 // rows moved by the roller, every tier
	RollTook time.Duration
	Tiers    []SketchTier
}

// SketchTier is the storage of one tier after the run.
type SketchTier struct {
	Step        string
	Rows        int64
	RowBytes    float64 // heap, TOAST and indexes of the tier's partitions per row, after VACUUM FULL
	SketchBytes float64 // mean stored (compressed) size of the visitors column, over rows that have one
	Dense       float64 // share of rows whose sketch is a HyperLogLog (more than 256 visitors)
}

// sketchLadder moves every minute of the run down to hours when the roller
// runs a month later: all rows roll, 1m → 5m → 1h.
const sketchLadder = "1m:1h,5m:2h,1h:forever"

// sketches: the history sink's rows/s and the roller's rows/s, without and
// with unique-visitor sketches, and the bytes per bucket row. In process
// (history.Sink and retention.Roller, no Kafka): the figures are the database
// work, which is what sketches change.
func (b *bench) sketches(ctx context.Context) error {
	for _, withVisitors := range []bool{false, true} {
		run, err := b.sketchRun(ctx, withVisitors)
		if err != nil {
			return err
		}
		b.res.Sketches = append(b.res.Sketches, run)
	}
	return nil
}

func (b *bench) sketchRun(ctx context.Context, withVisitors bool) (run SketchRun, err error) {
	run.Visitors = withVisitors
	name := fmt.Sprintf("fgbench_%s_sketch_%v", b.id, withVisitors)
	url, err := migrations.CreateDatabase(ctx, b.cfg.PostgresURL, name)
	if err != nil {
		return run, err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return run, errors.Join(fmt.Errorf("postgres %s: %w", name, err), migrations.DropDatabase(context.WithoutCancel(ctx), b.cfg.PostgresURL, name))
	}
	defer func() {
		pool.Close()
		err = errors.Join(err, migrations.DropDatabase(context.WithoutCancel(ctx), b.cfg.PostgresURL, name))
	}()
	ladder, _ := history.ParseLadder(sketchLadder)
	reg := prometheus.NewRegistry()
	cfg := history.SinkConfig{DB: pool, Group: "bench-sketches", Ladder: ladder, Logger: b.log, Registerer: reg}
	if withVisitors {
		cfg.Visitors = history.Visitors{"bench_visit": "ip"}
	}
	sink, err := history.NewSink(ctx, cfg)
	if err != nil {
		return run, err
	}
	start := time.Now()
	if err := b.sketchLoad(ctx, sink); err != nil {
		return run, err
	}
	run.SinkTook = time.Since(start)
	run.SinkRows = int64(gatherCounter(reg, "floodgate_history_bucket_rows_written_total"))
	tier, err := sketchStorage(ctx, pool, "1m")
	if err != nil {
		return run, err
	}
	run.Tiers = append(run.Tiers, tier)

	r, err := retention.New(retention.Config{Pool: pool, Ladder: ladder, Logger: b.log,
		Now: func() time.Time { return sketchStart.Add(30 * 24 * time.Hour) }})
	if err != nil {
		return run, err
	}
	start = time.Now()
	rep, err := r.RunOnce(ctx)
	if err != nil {
		return run, err
	}
	run.RollTook, run.RollRows = time.Since(start), rep.RowsMoved()
	tier, err = sketchStorage(ctx, pool, "1h")
	if err != nil {
		return run, err
	}
	run.Tiers = append(run.Tiers, tier)
	return run, nil
}

// sketchStart is the first minute of the synthetic visits.
var sketchStart = time.Date(2031, 6, 1, 0, 0, 0, 0, time.UTC)

// sketchLoad applies SketchEvents visits in batches of 10 000, each batch
// two minutes of traffic: links drawn from a Zipf law over SketchKeys (a few
// hot links get hundreds of visitors a minute and dense sketches, most a
// handful), visitors uniform over SketchVisitors.
func (b *bench) sketchLoad(ctx context.Context, sink *history.Sink) error {
	const per = 10_000
	r := rand.New(rand.NewPCG(16, 16))
	zipf := rand.NewZipf(r, 1.1, 1, uint64(b.cfg.SketchKeys-1))
	for off := 0; off < b.cfg.SketchEvents; off += per {
		batch := consume.Batch{Topic: "bench", First: int64(off), Last: int64(off + per - 1)}
		minute := sketchStart.Add(time.Duration(off/per) * 2 * time.Minute)
		for i := range per {
			batch.Records = append(batch.Records, consume.Record{Offset: int64(off + i), Event: event.Event{
				ID: "x", Action: "bench_visit", Kind: "link", Subject: fmt.Sprintf("link-%05d", zipf.Uint64()),
				TS: minute.Add(time.Duration(i*2/per) * time.Minute), N: 1,
				Attrs: map[string]string{"ip": fmt.Sprintf("v%d", r.IntN(b.cfg.SketchVisitors))},
			}})
		}
		if err := sink.Apply(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

// sketchStorage measures one tier: its partitions are rewritten first
// (VACUUM FULL), so that the dead versions the upserts left do not count.
func sketchStorage(ctx context.Context, pool *pgxpool.Pool, step string) (SketchTier, error) {
	t := SketchTier{Step: step}
	table := pgx.Identifier{"floodgate", "bucket_" + step}.Sanitize()
	if _, err := pool.Exec(ctx, `VACUUM FULL `+table); err != nil {
		return t, fmt.Errorf("vacuum %s: %w", table, err)
	}
	var bytes int64
	err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+table+`),
	(SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits WHERE inhparent = $1::regclass),
	(SELECT coalesce(avg(pg_column_size(visitors)), 0) FROM `+table+` WHERE NOT (visitors IS NULL)),
	(SELECT coalesce(avg(CASE WHEN (visitors).planes IS NULL THEN 0 ELSE 1 END), 0) FROM `+table+` WHERE NOT (visitors IS NULL))`,
		table).Scan(&t.Rows, &bytes, &t.SketchBytes, &t.Dense)
	if err != nil {
		return t, fmt.Errorf("storage of %s: %w", table, err)
	}
	if t.Rows > 0 {
		t.RowBytes = float64(bytes) / float64(t.Rows)
	}
	return t, nil
}
