package history

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/migrations"
)

// SinkConfig configures a Sink. Zero values take the defaults named per field.
type SinkConfig struct {
	// DB is the PostgreSQL pool. Required.
	DB DB
	// Group is the consumer group whose offsets the sink stores, e.g.
	// "floodgate-history". Required.
	Group string
	// Ladder is stored when the database holds none yet (the roller owns it
	// afterwards). Default DefaultLadder.
	Ladder Ladder
	// Visitors names, per action, the attr whose distinct values each
	// bucket and total keeps a sketch of (unique visitors). Default none.
	Visitors Visitors
	// Dedup, when positive, is the horizon within which an event whose id
	// history counted already is skipped (a producer's retry): ids are
	// checked and recorded in history_ids in the batch's transaction, and
	// pruned past the horizon by RunPartition. At least 1s; zero (the
	// default) counts every event.
	Dedup time.Duration
	// Privacy, when set, returns the storage policy for the next batch
	// (how each kind's subjects are stored: raw, hashed or not at all).
	// It is asked per batch, so a reloaded rules file applies from the next
	// batch on; its error fails the batch (retried, nothing written). Nil:
	// every subject raw.
	Privacy func() (*Privacy, error)
	// Now is the clock the dedup horizon is measured with. Default
	// time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the sink's metrics. Nil: not registered.
	Registerer prometheus.Registerer
}

// Validate reports the first problem with c.
func (c *SinkConfig) Validate() error {
	switch {
	case c.DB == nil:
		return errors.New("history sink config: no database")
	case c.Group == "":
		return errors.New("history sink config: no consumer group")
	case c.Dedup < 0 || (c.Dedup > 0 && c.Dedup < time.Second):
		return fmt.Errorf("history sink config: dedup horizon %s: want 0 (off) or at least 1s", c.Dedup)
	}
	if c.Ladder != nil {
		if err := c.Ladder.Validate(); err != nil {
			return fmt.Errorf("history sink config: %w", err)
		}
	}
	if err := c.Visitors.Validate(); err != nil {
		return fmt.Errorf("history sink config: %w", err)
	}
	return nil
}

func (c *SinkConfig) setDefaults() {
	if c.Ladder == nil {
		c.Ladder, _ = ParseLadder(DefaultLadder)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Sink writes batches of events into minute buckets (or, for late events,
// into whichever tier now covers their time), totals, and the partition's next
// offset, all in one statement: a batch is applied exactly once.
type Sink struct {
	cfg       SinkConfig
	applySQL  string
	resumeSQL string
	resetSQL  string
	idsSQL    string // dedup: record a batch's event ids
	pruneSQL  string // dedup: delete ids past the horizon
	log       *slog.Logger
	metrics   *sinkMetrics

	mu       sync.Mutex
	laddered bool               // the database holds a ladder
	parts    map[time.Time]bool // 1m partitions known to exist, by day

	pruneMu   sync.Mutex // one prune at a time (RunPartition)
	lastPrune time.Time
}

var (
	_ consume.Sink           = (*Sink)(nil)
	_ consume.OffsetResetter = (*Sink)(nil)
)

// NewSink checks cfg, stores the ladder if the database has none (now or,
// when Postgres is down, at the first Resume or Apply), and returns a Sink
// ready for an consume.Group.
func NewSink(ctx context.Context, cfg SinkConfig) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	offsets := qualify("consumer_offsets")
	m, err := newSinkMetrics(cfg.Registerer, cfg.Group)
	if err != nil {
		return nil, err
	}
	s := &Sink{
		cfg:      cfg,
		applySQL: applySQL(offsets),
		resumeSQL: `SELECT next_offset FROM ` + offsets +
			` WHERE consumer_group = $1 AND topic = $2 AND "partition" = $3`,
		resetSQL: `UPDATE ` + offsets + ` SET next_offset = $5, updated_at = now()` +
			` WHERE consumer_group = $1 AND topic = $2 AND "partition" = $3 AND next_offset = $4`,
		idsSQL:   idsSQL(offsets),
		pruneSQL: pruneSQL(),
		log:      cfg.Logger.With("group", cfg.Group),
		metrics:  m,
		parts:    map[time.Time]bool{},
	}
	if err := s.ready(ctx); err != nil {
		// Not fatal: Postgres may be down while the aggregator starts (the
		// live group must run regardless). Resume retries.
		s.log.Warn("history store not ready yet; will retry", "err", err)
	}
	return s, nil
}

// ready stores the ladder once if the database holds none, so that every
// minute has a tier to go to.
func (s *Sink) ready(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.laddered {
		return nil
	}
	if err := EnsureLadder(ctx, s.cfg.DB, s.cfg.Ladder, true); err != nil {
		return fmt.Errorf("history sink: %w", err)
	}
	if err := s.checkDedupTable(ctx); err != nil {
		return err
	}
	s.laddered = true
	return nil
}

// Resume returns the stored next offset of the partition.
func (s *Sink) Resume(ctx context.Context, topic string, partition int) (int64, bool, error) {
	if err := s.ready(ctx); err != nil {
		return 0, false, err
	}
	var next int64
	err := s.cfg.DB.QueryRow(ctx, s.resumeSQL, s.cfg.Group, topic, partition).Scan(&next)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("history resume group=%s topic=%s partition=%d: %w", s.cfg.Group, topic, partition, err)
	}
	return next, true, nil
}

// ResetOffset moves the partition's stored next offset back from from to to
// (consume.OffsetResetter): the topic was deleted and recreated, and the
// stored offset lies beyond the new log's end. The buckets and totals stay;
// the new log's events are added to them. It fails, changing nothing, when
// the stored offset is not from (another owner moved it).
func (s *Sink) ResetOffset(ctx context.Context, topic string, partition int, from, to int64) error {
	tag, err := s.cfg.DB.Exec(ctx, s.resetSQL, s.cfg.Group, topic, partition, from, to)
	if err != nil {
		return fmt.Errorf("history reset offset group=%s topic=%s partition=%d from %d to %d: %w", s.cfg.Group, topic, partition, from, to, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("history reset offset group=%s topic=%s partition=%d: it no longer stands at %d", s.cfg.Group, topic, partition, from)
	}
	return nil
}

// OffsetConflictError is returned for a batch that starts after the stored
// offset: a gap (events deleted by Kafka retention before history read
// them), or the stored offset moved back. Nothing was written. (A batch that
// overlaps the stored offset is trimmed to its new tail and applied; one
// wholly before it is a no-op.)
type OffsetConflictError struct {
	Topic       string
	Partition   int
	First, Last int64
	Stored      int64
}

func (e *OffsetConflictError) Error() string {
	return fmt.Sprintf("history: batch %s/%d [%d, %d] does not continue the stored next offset %d",
		e.Topic, e.Partition, e.First, e.Last, e.Stored)
}

// key is one (action, subject, kind, minute) bucket of a batch.
type key struct {
	action, subject, kind string
	minute                int64 // Unix seconds of the minute start
}

// rows is a batch summed into bucket rows, in key order, as the arrays the
// statement takes.
type rows struct {
	actions, subjects, kinds []string
	minutes                  []time.Time
	ns                       []int64
	// The visitors of each row, deduplicated: pairs (row ordinal, counted
	// from 1 like SQL's WITH ORDINALITY; hash of the value).
	visitorRows   []int32
	visitorHashes []int64
	events        int64 // sum of n
	visits        int64 // events that carried a counted attr
	dropped       int64 // events of kinds stored in no table (StoreDrop)
}

// summarize sums records into minute rows (a batch of 10 000 events about a
// few hot keys becomes a few rows) and collects each row's visitors. subs
// (nil: all raw, visitors hashed unkeyed) gives each subject its stored
// form, or drops its kind, and each visitor its hash.
func summarize(recs []consume.Record, vis Visitors, subs *subjects) rows {
	var out rows
	sums := make(map[key]int64, len(recs))
	seen := map[key][]int64{}
	for _, r := range recs {
		e := r.Event
		n := e.N
		if n == 0 {
			n = 1
		}
		subject, ok := subs.stored(e.Kind, e.Subject)
		if !ok {
			out.dropped += n
			continue
		}
		k := key{e.Action, subject, e.Kind, e.TS.Unix() - mod(e.TS.Unix(), 60)}
		sums[k] += n
		out.events += n
		if v, ok := vis.visitorOf(e, subs); ok {
			seen[k] = append(seen[k], subs.visitor(v))
			out.visits++
		}
	}
	keys := slices.SortedFunc(maps.Keys(sums), func(a, b key) int {
		return cmp.Or(strings.Compare(a.action, b.action), strings.Compare(a.subject, b.subject),
			strings.Compare(a.kind, b.kind), cmp.Compare(a.minute, b.minute))
	})
	out.actions = make([]string, 0, len(keys))
	out.subjects = make([]string, 0, len(keys))
	out.kinds = make([]string, 0, len(keys))
	out.minutes = make([]time.Time, 0, len(keys))
	out.ns = make([]int64, 0, len(keys))
	for i, k := range keys {
		out.actions = append(out.actions, k.action)
		out.subjects = append(out.subjects, k.subject)
		out.kinds = append(out.kinds, k.kind)
		out.minutes = append(out.minutes, time.Unix(k.minute, 0).UTC())
		out.ns = append(out.ns, sums[k])
		hs := seen[k]
		slices.Sort(hs)
		for _, h := range slices.Compact(hs) {
			out.visitorRows = append(out.visitorRows, int32(i+1))
			out.visitorHashes = append(out.visitorHashes, h)
		}
	}
	return out
}

// Apply sums the batch into minute buckets and writes them, the totals and
// the partition's next offset in one statement. A batch the store already
// holds is a no-op; a batch whose head it holds (a stale owner's batch
// overlapping the new owner's) is applied from the stored offset on.
func (s *Sink) Apply(ctx context.Context, b consume.Batch) error {
	for {
		trimTo, err := s.applyOnce(ctx, b)
		if err != nil || trimTo < 0 {
			return err
		}
		// The stored offset lies in (First, Last]: only the records from it on
		// are new. trimTo > b.First, so this ends.
		kept := consume.TrimBatch(b, trimTo)
		s.metrics.batches.WithLabelValues("trimmed").Inc()
		s.log.Info("batch overlaps the stored offset; applying its tail", "topic", b.Topic, "partition", b.Partition,
			"first", b.First, "last", b.Last, "stored", trimTo, "records_dropped", len(b.Records)-len(kept.Records))
		b = kept
	}
}

// applyOnce writes b, or returns trimTo >= 0 (and writes nothing) when the
// stored next offset trimTo lies inside (b.First, b.Last].
func (s *Sink) applyOnce(ctx context.Context, b consume.Batch) (int64, error) {
	start := time.Now()
	if err := s.ready(ctx); err != nil {
		return -1, err
	}
	if s.cfg.Dedup > 0 && len(b.Records) > 0 {
		return s.applyDedup(ctx, b, start)
	}
	subs, err := s.policy()
	if err != nil {
		return -1, fmt.Errorf("history apply %s/%d [%d, %d]: %w", b.Topic, b.Partition, b.First, b.Last, err)
	}
	rs := summarize(b.Records, s.cfg.Visitors, subs)
	if err := s.ensurePartitions(ctx, rs.minutes); err != nil {
		return -1, fmt.Errorf("history apply %s/%d [%d, %d]: %w", b.Topic, b.Partition, b.First, b.Last, err)
	}

	// One round trip, one implicit transaction: the routing lock, then the
	// statement.
	batch := &pgx.Batch{}
	batch.Queue(lockRouteShared, migrations.Schema)
	batch.Queue(s.applySQL, s.cfg.Group, b.Topic, b.Partition, b.First, b.Next(),
		rs.actions, rs.subjects, rs.kinds, rs.minutes, rs.ns, rs.visitorRows, rs.visitorHashes)
	var res applyResult
	br := s.cfg.DB.SendBatch(ctx, batch)
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&res.applied, &res.stored, &res.written, &res.late)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.metrics.errors.Inc()
		return -1, fmt.Errorf("history apply %s/%d [%d, %d]: %w", b.Topic, b.Partition, b.First, b.Last, err)
	}
	return s.settle(b, res, rs, 0, start)
}

// applyResult is what the batch statement (applySQL) answers.
type applyResult struct {
	applied       bool
	stored        *int64 // next offset stored before; nil: none
	written, late int64  // bucket rows written, late events
}

// settle turns a batch statement's answer into Apply's: nil when applied or
// already stored, trimTo >= 0 when the stored offset lies inside the batch,
// an *OffsetConflictError after a gap; and counts it. rs holds the events
// written, dupEvents those skipped as duplicates (dedup).
func (s *Sink) settle(b consume.Batch, res applyResult, rs rows, dupEvents int64, start time.Time) (int64, error) {
	s.metrics.seconds.Observe(time.Since(start).Seconds())
	if !res.applied {
		stored := res.stored
		switch {
		case stored != nil && *stored > b.Last:
			s.metrics.batches.WithLabelValues("duplicate").Inc()
			s.log.Debug("batch already applied", "topic", b.Topic, "partition", b.Partition, "first", b.First, "last", b.Last, "stored", *stored)
			return -1, nil
		case stored != nil && *stored > b.First:
			return *stored, nil
		}
		s.metrics.batches.WithLabelValues("conflict").Inc()
		var st int64
		if stored != nil {
			st = *stored
		}
		return -1, &OffsetConflictError{Topic: b.Topic, Partition: b.Partition, First: b.First, Last: b.Last, Stored: st}
	}
	s.metrics.batches.WithLabelValues("applied").Inc()
	s.metrics.rows.Add(float64(res.written))
	s.metrics.events.WithLabelValues("applied").Add(float64(rs.events))
	s.metrics.events.WithLabelValues("duplicate").Add(float64(dupEvents))
	s.metrics.events.WithLabelValues("not_stored").Add(float64(rs.dropped))
	s.metrics.visits.Add(float64(rs.visits))
	s.metrics.offset.WithLabelValues(b.Topic, fmt.Sprint(b.Partition)).Set(float64(b.Next()))
	if res.late > 0 {
		s.metrics.late.Add(float64(res.late))
		s.log.Warn("late events older than every tier's horizon: counted in totals and history_late, in no bucket",
			"topic", b.Topic, "partition", b.Partition, "first", b.First, "last", b.Last, "events", res.late)
	}
	return -1, nil
}

// policy returns the batch's subject mapping (nil: all raw).
func (s *Sink) policy() (*subjects, error) {
	if s.cfg.Privacy == nil {
		return nil, nil
	}
	p, err := s.cfg.Privacy()
	if err != nil {
		s.metrics.errors.Inc()
		return nil, err
	}
	return p.batch(), nil
}

// ensurePartitions creates the 1m partitions (UTC days) the minutes need.
// Rows for a missing partition would still land in the DEFAULT partition;
// creating it first keeps that partition small. Only days the 1m tier
// keeps get one: a day below its watermark (rolled_to) sends its rows to a
// coarser tier or to history_late (applySQL), and a day before its horizon
// would be rolled down by the next roll; their few rows go to the DEFAULT
// partition. So backdated events (one per distinct day, years back) cost
// no DDL each: the DDL of a batch is bounded by the days the tier keeps.
func (s *Sink) ensurePartitions(ctx context.Context, minutes []time.Time) error {
	var missing []time.Time
	s.mu.Lock()
	for _, m := range minutes {
		day := m.Truncate(24 * time.Hour)
		if !s.parts[day] && !slices.Contains(missing, day) {
			missing = append(missing, day)
		}
	}
	s.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	keeps, err := s.oneMinuteFrom(ctx)
	if err != nil {
		return err
	}
	kept := missing[:0]
	for _, day := range missing {
		if day.Add(24 * time.Hour).After(keeps) {
			kept = append(kept, day)
		}
	}
	if skipped := len(missing) - len(kept); skipped > 0 {
		s.metrics.unpartitioned.Add(float64(skipped))
		s.log.Debug("no 1m partition for days the 1m tier does not keep", "days", skipped, "tier_from", keeps)
	}
	for _, day := range kept {
		if _, err := s.cfg.DB.Exec(ctx, `SELECT `+qualify("ensure_partition")+`('1m', $1)`, day); err != nil {
			return fmt.Errorf("ensure 1m partition %s: %w", day.Format(time.DateOnly), err)
		}
		s.mu.Lock()
		s.parts[day] = true
		s.mu.Unlock()
	}
	return nil
}

// oneMinuteFrom is the oldest time the 1m tier keeps rows of: the later of
// its watermark and its horizon back from now.
func (s *Sink) oneMinuteFrom(ctx context.Context) (time.Time, error) {
	var rolled time.Time
	var horizon *float64 // seconds; NULL: forever
	err := s.cfg.DB.QueryRow(ctx, `SELECT CASE WHEN rolled_to = '-infinity' THEN timestamptz '0001-01-01 00:00:00+00' ELSE rolled_to END, extract(epoch FROM horizon)::float8 FROM `+
		qualify("history_tiers")+` WHERE step = '1m'`).Scan(&rolled, &horizon)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("read the 1m tier's watermark: %w", err)
	}
	if horizon != nil && *horizon > 0 {
		rolled = maxTime(rolled, s.cfg.Now().Add(-time.Duration(*horizon*float64(time.Second))))
	}
	return rolled, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// applySQL builds the batch statement. $1 group, $2 topic, $3 partition,
// $4 first offset, $5 next offset, $6..$10 the bucket arrays (action,
// subject, kind, minute, n), $11..$12 the visitor pairs (row ordinal, hash).
// It returns (applied, stored next offset before, bucket rows written, late
// events).
//
// Every upsert inserts in key order (ORDER BY), so concurrent batches take
// their row locks in the same order and cannot deadlock; the Go sort of the
// arrays does not survive GROUP BY.
//
// Each minute goes to the finest tier whose rolled_to is at or below it,
// binned to that tier's width; a minute below every watermark is late: it
// counts in totals and history_late only.
//
// Visitors: each row's hashes (distinct: summarize) become a sketch
// (sketch_sorted), sketches of rows binned together are merged
// (sketch_union_agg) and merged into the stored sketch on conflict
// (sketch_union) — in this statement, so they are as exactly-once as the
// counts. Rows without visitors carry NULL: the aggregate skips them and
// sketch_union, plain SQL, calls no function for them.
func applySQL(offsets string) string {
	q := qualify
	var b strings.Builder
	fmt.Fprintf(&b, `WITH cur AS (
	SELECT next_offset FROM %[1]s WHERE consumer_group = $1 AND topic = $2 AND "partition" = $3
), off AS (
	INSERT INTO %[1]s AS o (consumer_group, topic, "partition", next_offset, updated_at)
	VALUES ($1, $2, $3, $5, now())
	ON CONFLICT (consumer_group, topic, "partition") DO UPDATE
		SET next_offset = EXCLUDED.next_offset, updated_at = EXCLUDED.updated_at
		WHERE o.next_offset = $4
	RETURNING 1
), tiers AS (
	SELECT step, position, rolled_to FROM %[2]s
), v AS (
	SELECT i, %[3]s(array_agg(h ORDER BY h)) AS vis
	FROM unnest($11::int[], $12::bigint[]) AS v(i, h)
	WHERE EXISTS (SELECT 1 FROM off) GROUP BY i
), r AS (
	SELECT u.a, u.s, u.k, u.m, u.n, v.vis,
		(SELECT t.step FROM tiers t WHERE u.m >= t.rolled_to ORDER BY t.position LIMIT 1) AS step
	FROM unnest($6::text[], $7::text[], $8::text[], $9::timestamptz[], $10::bigint[]) WITH ORDINALITY AS u(a, s, k, m, n, i)
	LEFT JOIN v ON v.i = u.i
	WHERE EXISTS (SELECT 1 FROM off)
)`, offsets, q("history_tiers"), q("sketch_sorted"))
	agg, union := q("sketch_union_agg"), q("sketch_union")
	var written []string
	for _, st := range steps {
		cte := "w_" + st.Name
		fmt.Fprintf(&b, `, %[1]s AS (
	INSERT INTO %[2]s AS b (action, subject, kind, bucket, n, visitors)
	SELECT a, s, k, date_bin('%[3]d seconds', m, timestamptz '2000-01-03 00:00:00+00'), sum(n), %[5]s(vis)
	FROM r WHERE step = '%[4]s' GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
	ON CONFLICT (action, subject, kind, bucket) DO UPDATE
		SET n = b.n + EXCLUDED.n, visitors = %[6]s(b.visitors, EXCLUDED.visitors)
	RETURNING 1
)`, cte, q(st.Table()), int64(st.Width/time.Second), st.Name, agg, union)
		written = append(written, "(SELECT count(*) FROM "+cte+")")
	}
	fmt.Fprintf(&b, `, tot AS (
	INSERT INTO %[1]s AS t (action, subject, kind, n, first_at, last_at, visitors)
	SELECT a, s, k, sum(n), min(m), max(m), %[4]s(vis) FROM r GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
	ON CONFLICT (action, subject, kind) DO UPDATE
		SET n = t.n + EXCLUDED.n, first_at = least(t.first_at, EXCLUDED.first_at),
			last_at = greatest(t.last_at, EXCLUDED.last_at), updated_at = now(),
			visitors = %[5]s(t.visitors, EXCLUDED.visitors)
), late AS (
	INSERT INTO %[2]s AS l (action, subject, kind, n, first_at, last_at)
	SELECT a, s, k, sum(n), min(m), max(m) FROM r WHERE step IS NULL GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
	ON CONFLICT (action, subject, kind) DO UPDATE
		SET n = l.n + EXCLUDED.n, first_at = least(l.first_at, EXCLUDED.first_at),
			last_at = greatest(l.last_at, EXCLUDED.last_at), reported_at = now()
)
SELECT EXISTS (SELECT 1 FROM off), (SELECT next_offset FROM cur),
	%[3]s,
	(SELECT coalesce(sum(n), 0) FROM r WHERE step IS NULL)::bigint`,
		q("history_totals"), q("history_late"), strings.Join(written, " + "), agg, union)
	return b.String()
}
