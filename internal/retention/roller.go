package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/migrations"
)

// ErrBusy is returned by RunOnce when another roller holds the lock.
var ErrBusy = errors.New("roller: another roller is running")

// Config configures a Roller. Zero values take the defaults named per field.
type Config struct {
	// Pool is the PostgreSQL pool. Required. One connection is held for the
	// length of a run (it carries the one-roller-at-a-time lock).
	Pool *pgxpool.Pool
	// Ladder is the retention configuration; the roller stores it (it is
	// the authority on horizons). Default history.DefaultLadder.
	Ladder history.Ladder
	// ChunkBuckets sizes a roll transaction: about this many buckets of the
	// finer tier per key (rounded up to whole buckets of the coarser one).
	// Default 60 (1m→5m chunks of an hour, 5m→1h of 5 hours, 1h→1d of 3
	// days, 1d→1w of 9 weeks).
	ChunkBuckets int
	// ProgressEvery is the least time between two progress log lines of a
	// long run. Default 2s.
	ProgressEvery time.Duration
	// LockTimeout bounds each wait for a table lock in the roller's
	// transactions (lock_timeout), so that a long reader of a bucket table
	// makes the roller give up (dropping partitions waits for the next run; a
	// roll chunk fails the run, retried at the next tick) instead of queueing
	// every sink write behind it. Default 2s.
	LockTimeout time.Duration
	// Horizons says, per kind, how long history keeps the kind's rows
	// (rules.Set.HistoryHorizons: the personal kinds): after each run, rows
	// of such a kind older than its horizon are deleted at every tier, in
	// the late events, and from the totals (a subject's total then counts
	// the events within the horizon). Kinds not in it keep the ladder's
	// retention. Nil: none.
	Horizons map[string]time.Duration
	// Now is the clock horizons are measured from. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the roller's metrics. Nil: not registered.
	Registerer prometheus.Registerer
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("roller config: no database pool")
	case c.ChunkBuckets < 0:
		return fmt.Errorf("roller config: chunk buckets %d is negative", c.ChunkBuckets)
	case c.ProgressEvery < 0:
		return fmt.Errorf("roller config: progress interval %s is negative", c.ProgressEvery)
	case c.LockTimeout < 0:
		return fmt.Errorf("roller config: lock timeout %s is negative", c.LockTimeout)
	}
	if c.Ladder != nil {
		if err := c.Ladder.Validate(); err != nil {
			return fmt.Errorf("roller config: %w", err)
		}
	}
	for k, h := range c.Horizons {
		if k == "" || h < time.Hour {
			return fmt.Errorf("roller config: horizon of kind %q is %s: want a kind and at least an hour", k, h)
		}
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Ladder == nil {
		c.Ladder, _ = history.ParseLadder(history.DefaultLadder)
	}
	if c.ChunkBuckets == 0 {
		c.ChunkBuckets = 60
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 2 * time.Second
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = 2 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Roller applies the retention ladder.
type Roller struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	afterChunk func() // test hook: called after each committed roll chunk
}

// New checks cfg and returns a Roller.
func New(cfg Config) (*Roller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Roller{cfg: cfg, log: cfg.Logger, metrics: m}, nil
}

// TierReport is what one run did to one rung of the ladder.
type TierReport struct {
	From, To    string    // steps; To is "" for the last tier's expiry
	RolledTo    time.Time // the tier's watermark after the run (zero: -infinity)
	Chunks      int       // roll transactions committed
	RowsMoved   int64     // rows deleted from From
	RowsWritten int64     // rows inserted or updated in To
	Events      int64     // sum of n moved (or expired)
	Dropped     int       // partitions dropped
}

// ForgetReport is what one run deleted of a kind past its horizon
// (Config.Horizons) from one table.
type ForgetReport struct {
	Kind   string
	Before time.Time // rows wholly older than this went
	Table  string
	Rows   int64
	Events int64 // sum of n of the rows deleted
}

// Report is what one run did.
type Report struct {
	Now   time.Time
	Tiers []TierReport
	// Forgotten lists the tables a kind's rows past its horizon were
	// deleted from (none: nothing was past).
	Forgotten []ForgetReport
	Duration  time.Duration
}

// RowsMoved sums the rows moved over tiers.
func (r Report) RowsMoved() int64 {
	var n int64
	for _, t := range r.Tiers {
		n += t.RowsMoved
	}
	return n
}

// Run calls RunOnce now and every interval until ctx ends. Errors are logged
// and retried at the next tick.
func (r *Roller) Run(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("roller: interval %s must be positive", every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		rep, err := r.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrBusy):
			r.log.Info("another roller is running; skipping this tick")
		case err != nil:
			r.log.Error("roller run failed; retrying at the next tick", "err", err)
		default:
			r.log.Info("roller run done", "rows_moved", rep.RowsMoved(), "took", rep.Duration.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunOnce rolls every tier down the ladder as of Now, then drops the
// partitions that are wholly past their horizon. Each chunk is one
// transaction that moves rows and raises the tier's watermark together, so a
// run killed at any point leaves a consistent history, and running again
// finishes the work; a finished run repeated changes nothing.
func (r *Roller) RunOnce(ctx context.Context) (rep Report, err error) {
	start := time.Now()
	now := r.cfg.Now().UTC()
	rep.Now = now
	defer func() {
		rep.Duration = time.Since(start)
		switch {
		case errors.Is(err, ErrBusy):
			r.metrics.runs.WithLabelValues("busy").Inc()
		case err != nil:
			r.metrics.runs.WithLabelValues("error").Inc()
		default:
			r.metrics.runs.WithLabelValues("ok").Inc()
			r.metrics.lastSuccess.SetToCurrentTime()
			r.metrics.duration.Observe(rep.Duration.Seconds())
		}
	}()

	conn, err := r.cfg.Pool.Acquire(ctx)
	if err != nil {
		return rep, fmt.Errorf("roller: acquire connection: %w", err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('floodgate.history'), hashtext($1 || '.roller'))`,
		migrations.Schema).Scan(&locked); err != nil {
		return rep, fmt.Errorf("roller: take lock: %w", err)
	}
	if !locked {
		return rep, ErrBusy
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtext('floodgate.history'), hashtext($1 || '.roller'))`, migrations.Schema); uerr != nil {
			// Closing the session releases the lock for sure.
			_ = conn.Conn().Close(uctx)
		}
	}()

	if err := history.EnsureLadder(ctx, conn, r.cfg.Ladder, false); err != nil {
		return rep, fmt.Errorf("roller: %w", err)
	}
	// Partitions ahead, so that the sink's inserts never wait on DDL and the
	// DEFAULT partitions stay empty.
	for _, t := range r.cfg.Ladder {
		for _, at := range []time.Time{now, now.Add(24 * time.Hour)} {
			if _, err := conn.Exec(ctx, `SELECT `+r.q("ensure_partition")+`($1, $2)`, t.Name, at); err != nil {
				return rep, fmt.Errorf("roller: create %s partition for %s: %w", t.Name, at.Format(time.RFC3339), err)
			}
		}
	}
	l := r.cfg.Ladder
	for i := 0; i+1 < len(l); i++ {
		tr, err := r.roll(ctx, conn, l[i], l[i+1], now)
		rep.Tiers = append(rep.Tiers, tr)
		if err != nil {
			return rep, err
		}
	}
	if last := l[len(l)-1]; !last.Forever() {
		tr, err := r.expire(ctx, conn, last, now)
		rep.Tiers = append(rep.Tiers, tr)
		if err != nil {
			return rep, err
		}
	}
	rep.Forgotten, err = r.forget(ctx, conn, now)
	return rep, err
}

// q names a table of history's schema (migrations.Schema), after which the
// roller's lock is named too, as it always was.
func (r *Roller) q(name string) string { return pgx.Identifier{migrations.Schema, name}.Sanitize() }

// begin starts a transaction whose lock waits are bounded by LockTimeout.
func (r *Roller) begin(ctx context.Context, conn *pgxpool.Conn, f func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`,
			strconv.FormatInt(max(r.cfg.LockTimeout.Milliseconds(), 1), 10)); err != nil {
			return fmt.Errorf("set lock_timeout: %w", err)
		}
		return f(tx)
	})
}

// lockTimedOut reports whether err is a lock wait that hit lock_timeout.
func lockTimedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// chunk returns the span of one roll transaction from a to b.
func (r *Roller) chunk(a, b history.Tier) time.Duration {
	want := a.Width * time.Duration(r.cfg.ChunkBuckets)
	k := (want + b.Width - 1) / b.Width
	return max(k, 1) * b.Width
}

// roll moves tier a's buckets older than its horizon into tier b, chunk by
// chunk from the oldest, then drops a's partitions left empty.
func (r *Roller) roll(ctx context.Context, conn *pgxpool.Conn, a, b history.Tier, now time.Time) (TierReport, error) {
	rep := TierReport{From: a.Name, To: b.Name}
	cutoff := history.Bin(now.Add(-a.Horizon), b.Width)
	// Start at the watermark (the previous runs rolled everything below it),
	// or at the oldest row when rows lie below it (after a ladder change):
	// never walk the empty chunks between a partition's start and the
	// watermark again.
	var oldest *time.Time
	if err := conn.QueryRow(ctx, `SELECT CASE WHEN o.b IS NULL OR o.b >= t.rolled_to
		OR EXISTS (SELECT 1 FROM `+r.q(a.Table())+` WHERE bucket < t.rolled_to) THEN o.b ELSE t.rolled_to END
FROM `+r.q("history_tiers")+` t, LATERAL (SELECT `+r.q("oldest_bucket")+`($1) AS b) o WHERE t.step = $1`, a.Name).Scan(&oldest); err != nil {
		return rep, fmt.Errorf("roller: oldest bucket of %s: %w", a.Name, err)
	}
	chunk := r.chunk(a, b)
	var lo time.Time
	if oldest != nil && oldest.Before(cutoff) {
		lo = history.Bin(*oldest, chunk)
	} else {
		lo = cutoff // nothing to move; still raise the watermark
	}
	total := int((cutoff.Sub(lo) + chunk - 1) / chunk)
	lastLog := time.Now()
	for {
		hi := lo.Add(chunk)
		if hi.After(cutoff) || !lo.Before(cutoff) {
			hi = cutoff
		}
		moved, written, events, err := r.rollChunk(ctx, conn, a, b, lo, hi)
		if err != nil {
			return rep, fmt.Errorf("roller: roll %s→%s [%s, %s): %w", a.Name, b.Name, lo.Format(time.RFC3339), hi.Format(time.RFC3339), err)
		}
		if r.afterChunk != nil {
			r.afterChunk()
		}
		rep.Chunks++
		rep.RowsMoved += moved
		rep.RowsWritten += written
		rep.Events += events
		rep.RolledTo = hi
		r.metrics.moved.WithLabelValues(a.Name, b.Name).Add(float64(moved))
		r.metrics.written.WithLabelValues(a.Name, b.Name).Add(float64(written))
		if time.Since(lastLog) >= r.cfg.ProgressEvery {
			lastLog = time.Now()
			r.log.Info("rolling", "from", a.Name, "to", b.Name, "chunk", rep.Chunks, "of", total,
				"up_to", hi.Format(time.RFC3339), "rows_moved", rep.RowsMoved)
		}
		lo = hi
		if !lo.Before(cutoff) {
			break
		}
	}
	dropped, err := r.dropEmpty(ctx, conn, a)
	if err != nil {
		return rep, err
	}
	rep.Dropped = dropped
	r.log.Debug("rolled", "from", a.Name, "to", b.Name, "rolled_to", cutoff.Format(time.RFC3339),
		"chunks", rep.Chunks, "rows_moved", rep.RowsMoved, "rows_written", rep.RowsWritten, "partitions_dropped", dropped)
	return rep, nil
}

// rollChunk moves [lo, hi) of tier a into tier b and raises a's watermark to
// hi, in one transaction under the exclusive routing lock.
func (r *Roller) rollChunk(ctx context.Context, conn *pgxpool.Conn, a, b history.Tier, lo, hi time.Time) (moved, written, events int64, err error) {
	err = r.begin(ctx, conn, func(tx pgx.Tx) error {
		if err := history.LockRoute(ctx, tx); err != nil {
			return err
		}
		if lo.Before(hi) {
			for _, at := range []time.Time{lo, hi.Add(-time.Microsecond)} {
				if _, err := tx.Exec(ctx, `SELECT `+r.q("ensure_partition")+`($1, $2)`, b.Name, at); err != nil {
					return fmt.Errorf("create %s partition: %w", b.Name, err)
				}
			}
			// Counts add up; visitor sketches merge (a visitor of several
			// finer buckets counts once in the coarser one).
			err := tx.QueryRow(ctx, fmt.Sprintf(`WITH moved AS (
	DELETE FROM %[1]s WHERE bucket >= $1 AND bucket < $2 RETURNING action, subject, kind, bucket, n, visitors
), ins AS (
	INSERT INTO %[2]s AS b (action, subject, kind, bucket, n, visitors)
	SELECT action, subject, kind, date_bin('%[3]d seconds', bucket, timestamptz '2000-01-03 00:00:00+00'), sum(n), %[4]s(visitors)
	FROM moved GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4 -- row locks in key order, as the sink's
	ON CONFLICT (action, subject, kind, bucket) DO UPDATE
		SET n = b.n + EXCLUDED.n, visitors = %[5]s(b.visitors, EXCLUDED.visitors)
	RETURNING 1
)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM ins), (SELECT coalesce(sum(n), 0)::bigint FROM moved)`,
				r.q(a.Table()), r.q(b.Table()), int64(b.Width/time.Second), r.q("sketch_union_agg"), r.q("sketch_union")),
				lo, hi).Scan(&moved, &written, &events)
			if err != nil {
				return fmt.Errorf("move rows: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE `+r.q("history_tiers")+` SET rolled_to = $2, updated_at = now() WHERE step = $1 AND rolled_to < $2`, a.Name, hi); err != nil {
			return fmt.Errorf("raise watermark: %w", err)
		}
		return nil
	})
	return moved, written, events, err
}

// dropEmpty drops tier a's partitions that end at or below its watermark and
// hold no row. It needs no routing lock: no sink writes into a tier below its
// watermark (a sink statement routes by the watermarks of every roll chunk
// committed before it), and drop_partitions locks the table before checking
// that a partition is empty. When a reader holds the table past LockTimeout,
// the drop waits for the next run.
func (r *Roller) dropEmpty(ctx context.Context, conn *pgxpool.Conn, a history.Tier) (int, error) {
	var dropped int
	err := r.begin(ctx, conn, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT `+r.q("drop_partitions")+`($1, (SELECT rolled_to FROM `+r.q("history_tiers")+` WHERE step = $1), true)`,
			a.Name).Scan(&dropped)
	})
	if lockTimedOut(err) {
		r.log.Info("bucket table busy; dropping its empty partitions at the next run", "step", a.Name, "lock_timeout", r.cfg.LockTimeout)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("roller: drop empty %s partitions: %w", a.Name, err)
	}
	r.metrics.dropped.WithLabelValues(a.Name).Add(float64(dropped))
	return dropped, nil
}

// expire drops the last tier's partitions wholly older than its horizon and
// raises its watermark to their end: later events for that time are late.
func (r *Roller) expire(ctx context.Context, conn *pgxpool.Conn, t history.Tier, now time.Time) (TierReport, error) {
	rep := TierReport{From: t.Name}
	err := r.begin(ctx, conn, func(tx pgx.Tx) error {
		if err := history.LockRoute(ctx, tx); err != nil {
			return err
		}
		var cutoff time.Time
		if err := tx.QueryRow(ctx, `SELECT lo FROM `+r.q("partition_bounds")+`($1, $2)`, t.Name, now.Add(-t.Horizon)).Scan(&cutoff); err != nil {
			return fmt.Errorf("cutoff: %w", err)
		}
		var before int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(n), 0)::bigint FROM `+r.q("history_expired")+` WHERE step = $1`, t.Name).Scan(&before); err != nil {
			return fmt.Errorf("read expired: %w", err)
		}
		if err := tx.QueryRow(ctx, `SELECT `+r.q("drop_partitions")+`($1, $2, false)`, t.Name, cutoff).Scan(&rep.Dropped); err != nil {
			return fmt.Errorf("drop partitions: %w", err)
		}
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(n), 0)::bigint - $2 FROM `+r.q("history_expired")+` WHERE step = $1`, t.Name, before).Scan(&rep.Events); err != nil {
			return fmt.Errorf("read expired: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE `+r.q("history_tiers")+` SET rolled_to = $2, updated_at = now() WHERE step = $1 AND rolled_to < $2`, t.Name, cutoff); err != nil {
			return fmt.Errorf("raise watermark: %w", err)
		}
		rep.RolledTo = cutoff
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("roller: expire %s: %w", t.Name, err)
	}
	r.metrics.dropped.WithLabelValues(t.Name).Add(float64(rep.Dropped))
	r.metrics.expired.WithLabelValues(t.Name).Add(float64(rep.Events))
	if rep.Events > 0 {
		r.log.Info("expired", "step", t.Name, "before", rep.RolledTo.Format(time.RFC3339), "events", rep.Events, "partitions", rep.Dropped)
	}
	return rep, nil
}

// forgetChunk bounds one forget transaction, which holds the routing lock
// (sinks wait): the first run over a long history deletes in many short
// steps.
const forgetChunk = 10000

// forget deletes, per kind with a horizon, the rows wholly older than it:
// bucket rows whose bucket ends at or before now - horizon, late events
// and totals last seen before it. Deleted bucket and late rows are taken off
// their subjects' totals in the same transaction, so a total counts the
// events still kept (and late ones). A kind's horizon applies at every
// tier, whatever the ladder keeps.
func (r *Roller) forget(ctx context.Context, conn *pgxpool.Conn, now time.Time) ([]ForgetReport, error) {
	var out []ForgetReport
	kinds := make([]string, 0, len(r.cfg.Horizons))
	for k := range r.cfg.Horizons {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	totals := r.q("history_totals")
	for _, kind := range kinds {
		cutoff := now.Add(-r.cfg.Horizons[kind])
		for _, t := range history.SubjectTables() {
			var del string
			before := cutoff
			switch {
			case t.Width > 0: // bucket rows end at bucket + width
				before = cutoff.Add(-t.Width)
				del = `SELECT action, subject, kind, bucket FROM ` + r.q(t.Name) + ` WHERE kind = $1 AND bucket <= $2 LIMIT $3`
				del = `DELETE FROM ` + r.q(t.Name) + ` WHERE (action, subject, kind, bucket) IN (` + del + `) RETURNING action, subject, n`
			case t.Name == "history_totals":
				del = `DELETE FROM ` + totals + ` WHERE (action, subject, kind) IN (SELECT action, subject, kind FROM ` + totals +
					` WHERE kind = $1 AND (last_at < $2 OR n <= 0) LIMIT $3) RETURNING action, subject, n`
			default:
				del = `DELETE FROM ` + r.q(t.Name) + ` WHERE (action, subject, kind) IN (SELECT action, subject, kind FROM ` + r.q(t.Name) +
					` WHERE kind = $1 AND last_at < $2 LIMIT $3) RETURNING action, subject, n`
			}
			sub, args := "", []any{kind, before, forgetChunk}
			if t.Name != "history_totals" {
				args = append(args, cutoff)
				sub = `, s AS (SELECT action, subject, sum(n) AS n FROM d GROUP BY 1, 2
), u AS (
	UPDATE ` + totals + ` t SET n = t.n - s.n, first_at = greatest(t.first_at, $4), updated_at = now()
	FROM s WHERE t.action = s.action AND t.subject = s.subject AND t.kind = $1
)`
			}
			fr := ForgetReport{Kind: kind, Before: before, Table: t.Name}
			for {
				var rows, events int64
				err := r.begin(ctx, conn, func(tx pgx.Tx) error {
					if err := history.LockRoute(ctx, tx); err != nil {
						return err
					}
					return tx.QueryRow(ctx, `WITH d AS (`+del+`)`+sub+`
SELECT count(*), coalesce(sum(n), 0)::bigint FROM d`, args...).Scan(&rows, &events)
				})
				if err != nil {
					return out, fmt.Errorf("roller: forget kind %s before %s in %s: %w", kind, before.Format(time.RFC3339), t.Name, err)
				}
				fr.Rows += rows
				fr.Events += events
				if rows < forgetChunk {
					break
				}
			}
			if fr.Rows > 0 {
				r.metrics.forgotten.WithLabelValues(kind, t.Name).Add(float64(fr.Rows))
				r.log.Info("forgot rows past their kind's horizon", "kind", kind, "horizon", r.cfg.Horizons[kind],
					"table", t.Name, "before", before.Format(time.RFC3339), "rows", fr.Rows, "events", fr.Events)
				out = append(out, fr)
			}
		}
	}
	return out, nil
}
