package history

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/migrations"
)

// Dedup by event id (SinkConfig.Dedup, migration 00006, docs/history.md
// "Dedup"): the ids of counted events live in history_ids with the time they
// were counted. A batch's transaction first locks the partition's offset row
// and records its ids (idsSQL), then writes the buckets of the events whose
// id was new (applySQL, unchanged), so ids and counts commit together.

// IDKey returns the key of an event id in history_ids: the first 16 bytes
// of its SHA-256 (floodgate.history_id(text) in SQL).
func IDKey(id string) [16]byte {
	sum := sha256.Sum256([]byte(id))
	return [16]byte(sum[:16])
}

const (
	// pruneChunk bounds one prune statement: a short transaction that
	// holds few row locks.
	pruneChunk = 10000
	// pruneEveryMax bounds the prune interval: history_ids holds at most the
	// ids of the horizon plus this.
	pruneEveryMax = time.Minute
)

// pruneEvery is how often RunPartition prunes: a quarter of the horizon,
// between 1s and pruneEveryMax.
func pruneEvery(horizon time.Duration) time.Duration {
	return min(max(horizon/4, time.Second), pruneEveryMax)
}

// batchIDs returns the distinct keys of recs' ids in order of first
// occurrence, the record index of each, and which records repeat an id
// seen earlier in recs (those are duplicates whatever the store holds).
func batchIDs(recs []consume.Record) (keys [][16]byte, at []int, dup []bool) {
	dup = make([]bool, len(recs))
	first := make(map[[16]byte]struct{}, len(recs))
	keys = make([][16]byte, 0, len(recs))
	at = make([]int, 0, len(recs))
	for i := range recs {
		k := IDKey(recs[i].Event.ID)
		if _, ok := first[k]; ok {
			dup[i] = true
			continue
		}
		first[k] = struct{}{}
		keys = append(keys, k)
		at = append(at, i)
	}
	return keys, at, dup
}

// applyDedup is applyOnce with dedup on: one transaction that takes the
// routing lock, locks the partition's offset row and, if the batch starts
// at the stored offset (or none is stored), records its new ids (idsSQL);
// then writes the buckets of the records whose id was new with the offset
// compare-and-set (applySQL). A batch that is not the partition's next is
// rolled back with nothing recorded, and reported as without dedup.
func (s *Sink) applyDedup(ctx context.Context, b consume.Batch, start time.Time) (trimTo int64, err error) {
	now := s.cfg.Now()
	subs, err := s.policy()
	if err != nil {
		return -1, fmt.Errorf("history apply %s/%d [%d, %d]: %w", b.Topic, b.Partition, b.First, b.Last, err)
	}
	keys, at, dup := batchIDs(b.Records)
	days := make([]time.Time, len(b.Records))
	for i, r := range b.Records {
		days[i] = r.Event.TS.UTC()
	}
	where := func(what string, err error) error {
		s.metrics.errors.Inc()
		return fmt.Errorf("history apply %s/%d [%d, %d]: %s: %w", b.Topic, b.Partition, b.First, b.Last, what, err)
	}
	// Partitions before the transaction: DDL never runs inside the write.
	if err := s.ensurePartitions(ctx, days); err != nil {
		return -1, fmt.Errorf("history apply %s/%d [%d, %d]: %w", b.Topic, b.Partition, b.First, b.Last, err)
	}

	tx, err := s.cfg.DB.Begin(ctx)
	if err != nil {
		return -1, where("begin", err)
	}
	committed := false
	defer func() {
		if !committed {
			// Nothing to keep: a failed or refused batch wrote nothing.
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()

	stored, seen, err := s.recordIDs(ctx, tx, b, now, keys)
	if err != nil {
		return -1, where("record event ids", err)
	}
	if stored != nil && *stored != b.First {
		// Not the partition's next batch: replayed, overlapping or after a
		// gap. Rolled back; the outcome is decided as without dedup.
		return s.settle(b, applyResult{stored: stored}, rows{}, 0, start)
	}
	for _, o := range seen {
		dup[at[o-1]] = true
	}
	kept, dupEvents := withoutRepeats(b.Records, dup)
	rs := summarize(kept, s.cfg.Visitors, subs)
	var res applyResult
	err = tx.QueryRow(ctx, s.applySQL, s.cfg.Group, b.Topic, b.Partition, b.First, b.Next(),
		rs.actions, rs.subjects, rs.kinds, rs.minutes, rs.ns, rs.visitorRows, rs.visitorHashes).
		Scan(&res.applied, &res.stored, &res.written, &res.late)
	if err != nil {
		return -1, where("write buckets", err)
	}
	if !res.applied {
		// Another owner stored the partition's first offset meanwhile:
		// rolled back, ids included.
		return s.settle(b, res, rows{}, 0, start)
	}
	if err := tx.Commit(ctx); err != nil {
		return -1, where("commit", err)
	}
	committed = true
	return s.settle(b, res, rs, dupEvents, start)
}

// recordIDs records the batch's event ids (keys, distinct) in tx, under
// the route lock; it returns the partition's stored offset (nil: none)
// and the ordinals (from 1) of the keys counted within the horizon.
func (s *Sink) recordIDs(ctx context.Context, tx pgx.Tx, b consume.Batch, now time.Time, keys [][16]byte) (stored *int64, seen []int32, err error) {
	pb := &pgx.Batch{}
	pb.Queue(lockRouteShared, migrations.Schema)
	pb.Queue(s.idsSQL, s.cfg.Group, b.Topic, b.Partition, b.First, now, keys, now.Add(-s.cfg.Dedup))
	br := tx.SendBatch(ctx, pb)
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&stored, &seen)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return stored, seen, err
}

// withoutRepeats returns the records not marked in dup, and how many
// events the marked ones carried.
func withoutRepeats(records []consume.Record, dup []bool) (kept []consume.Record, dupEvents int64) {
	kept = make([]consume.Record, 0, len(records))
	for i, r := range records {
		if dup[i] {
			dupEvents += max(r.Event.N, 1)
			continue
		}
		kept = append(kept, r)
	}
	return kept, dupEvents
}

// idsSQL builds the statement that records a batch's event ids. $1 group,
// $2 topic, $3 partition, $4 first offset, $5 now, $6 the keys (distinct),
// $7 the horizon's start (now - Dedup). It locks the partition's offset row,
// creating it at $4 when there is none, so that the partition's batches
// take turns from here on (without the row, two first batches would record
// ids concurrently and could deadlock on each other's ids and the row), and
// the compare-and-set that follows in the transaction finds the offset
// unchanged. Unless the stored offset is not $4 (this is not the
// partition's next batch), it inserts the keys not counted after $7: an id
// counted at or before it counts again, pruned or not. It returns the
// stored offset and the ordinals (from 1) of the keys counted already.
//
// Keys are inserted in order, so that two transactions inserting the same
// ids (only possible across partitions) take their locks in the same order.
func idsSQL(offsets string) string {
	return fmt.Sprintf(`WITH cur AS (
	INSERT INTO %[1]s AS o (consumer_group, topic, "partition", next_offset, updated_at)
	VALUES ($1, $2, $3, $4, now())
	ON CONFLICT (consumer_group, topic, "partition") DO UPDATE SET updated_at = o.updated_at
	RETURNING next_offset
), ins AS (
	INSERT INTO %[2]s AS i (id, counted_at)
	SELECT k, $5 FROM unnest($6::uuid[]) AS k
	WHERE NOT EXISTS (SELECT 1 FROM cur WHERE next_offset <> $4)
	ORDER BY k
	ON CONFLICT (id) DO UPDATE SET counted_at = EXCLUDED.counted_at WHERE i.counted_at <= $7
	RETURNING id
)
SELECT (SELECT next_offset FROM cur),
	ARRAY(SELECT o::int FROM unnest($6::uuid[]) WITH ORDINALITY AS u(k, o) WHERE u.k NOT IN (SELECT id FROM ins) ORDER BY o)`,
		offsets, qualify("history_ids"))
}

// pruneSQL deletes up to $2 ids counted at or before $1. Rows another
// transaction holds (an expired id being counted again) are skipped, so the
// pruner never waits for a sink write and cannot deadlock with one.
func pruneSQL() string {
	ids := qualify("history_ids")
	return `DELETE FROM ` + ids + ` WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM ` + ids + ` WHERE counted_at <= $1 ORDER BY counted_at LIMIT $2 FOR UPDATE SKIP LOCKED))`
}

// Prune deletes the ids counted before the dedup horizon, in chunks, until
// none is left or ctx ends, and returns how many it deleted. It is garbage
// collection only: an id past the horizon counts again whether or not it was
// pruned. RunPartition calls it in the background; a no-op without dedup.
func (s *Sink) Prune(ctx context.Context) (int64, error) {
	if s.cfg.Dedup <= 0 {
		return 0, nil
	}
	cutoff := s.cfg.Now().Add(-s.cfg.Dedup)
	var total int64
	for {
		tag, err := s.cfg.DB.Exec(ctx, s.pruneSQL, cutoff, pruneChunk)
		if err != nil {
			return total, fmt.Errorf("history prune ids counted before %s: %w", cutoff.Format(time.RFC3339), err)
		}
		n := tag.RowsAffected()
		total += n
		s.metrics.pruned.Add(float64(n))
		if n < pruneChunk {
			return total, nil
		}
	}
}

// RunPartition implements consume.PartitionRunner: with dedup on, while
// this member owns partitions, it prunes the ids past the horizon every
// pruneEvery (one prune at a time per sink, whichever partition's runner
// gets there first). The sink prunes, not the roller: the sink alone knows
// the horizon (--dedup is the aggregator's flag) and writes the ids, so the
// table stays bounded wherever ids are written, roller or not.
func (s *Sink) RunPartition(ctx context.Context, _ string, _ int) {
	if s.cfg.Dedup <= 0 {
		return
	}
	every := pruneEvery(s.cfg.Dedup)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !s.pruneMu.TryLock() {
			continue
		}
		if time.Since(s.lastPrune) >= every {
			n, err := s.Prune(ctx)
			s.lastPrune = time.Now()
			switch {
			case err != nil && ctx.Err() == nil:
				s.metrics.prunes.WithLabelValues("error").Inc()
				s.log.Warn("history dedup: pruning event ids failed; retried later", "err", err)
			case err == nil:
				s.metrics.prunes.WithLabelValues("ok").Inc()
				s.log.Debug("history dedup: pruned event ids", "ids", n)
			}
		}
		s.pruneMu.Unlock()
	}
}

var _ consume.PartitionRunner = (*Sink)(nil)

// checkDedupTable reports a clear error when dedup is on and history_ids
// does not exist (migration 00006 not applied).
func (s *Sink) checkDedupTable(ctx context.Context) error {
	if s.cfg.Dedup <= 0 {
		return nil
	}
	var ok bool
	if err := s.cfg.DB.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, qualify("history_ids")).Scan(&ok); err != nil {
		return fmt.Errorf("history dedup: look up %s.history_ids: %w", migrations.Schema, err)
	}
	if !ok {
		return errors.New("history dedup: table " + migrations.Schema + ".history_ids missing: apply the migrations (floodgate migrate up)")
	}
	return nil
}
