package history

import (
	"context"
	"fmt"
	"time"
)

// MinuteRow is the count of one key in one minute bucket.
type MinuteRow struct {
	Action, Kind, Subject string
	Minute                time.Time // the bucket's start (UTC)
	N                     int64
}

// ActionKind selects the keys of one action and kind.
type ActionKind struct{ Action, Kind string }

// minutesChunk bounds one query of Minutes: an hour of minute buckets is
// sorted at once, never the whole range.
const minutesChunk = time.Hour

// Minutes calls fn for every minute bucket (tier 1m) of the selected
// actions and kinds starting in [from, to), in time order (within a
// minute, by key). Minutes the roller already moved to coarser tiers are
// not there: Tiers tells from when the 1m tier holds them. fn's error
// stops the walk and is returned.
func (q *Querier) Minutes(ctx context.Context, sel []ActionKind, from, to time.Time, fn func(MinuteRow) error) error {
	actions := make([]string, len(sel))
	kinds := make([]string, len(sel))
	for i, s := range sel {
		actions[i], kinds[i] = s.Action, s.Kind
	}
	sql := `SELECT b.action, b.kind, b.subject, b.bucket, b.n FROM ` + qualify("bucket_1m") + ` b
		WHERE b.bucket >= $1 AND b.bucket < $2
		  AND (b.action, b.kind) IN (SELECT * FROM unnest($3::text[], $4::text[]))
		ORDER BY b.bucket, b.action, b.kind, b.subject`
	for lo := from; lo.Before(to); lo = lo.Add(minutesChunk) {
		hi := lo.Add(minutesChunk)
		if hi.After(to) {
			hi = to
		}
		if err := q.minutes(ctx, sql, lo, hi, actions, kinds, fn); err != nil {
			return err
		}
	}
	return nil
}

func (q *Querier) minutes(ctx context.Context, sql string, from, to time.Time, actions, kinds []string, fn func(MinuteRow) error) error {
	rows, err := q.db.Query(ctx, sql, from, to, actions, kinds)
	if err != nil {
		return fmt.Errorf("minute buckets [%s, %s): %w", from.Format(time.RFC3339), to.Format(time.RFC3339), err)
	}
	defer rows.Close()
	for rows.Next() {
		var r MinuteRow
		if err := rows.Scan(&r.Action, &r.Kind, &r.Subject, &r.Minute, &r.N); err != nil {
			return fmt.Errorf("minute buckets [%s, %s): %w", from.Format(time.RFC3339), to.Format(time.RFC3339), err)
		}
		r.Minute = r.Minute.UTC()
		if err := fn(r); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("minute buckets [%s, %s): %w", from.Format(time.RFC3339), to.Format(time.RFC3339), err)
	}
	return nil
}
