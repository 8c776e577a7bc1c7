package history

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/floodgate-dev/floodgate/migrations"
)

// DB is what history needs of a PostgreSQL connection pool; *pgxpool.Pool
// implements it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
}

var _ DB = (*pgxpool.Pool)(nil)

// qualify returns schema.name, each quoted. migrations.Schema holds
// history's tables and functions and the consumer offsets, as floodgate's
// migrations create them: a history of one's own is a database of one's
// own (tests create one each).
func qualify(name string) string { return pgx.Identifier{migrations.Schema, name}.Sanitize() }

// The routing lock orders sinks and the roller: every sink write holds it
// shared, every roller chunk (which moves rows and raises a watermark) holds
// it exclusively. So a sink statement always routes by the watermarks of
// committed roller chunks, and never writes below one.
const (
	lockRouteShared    = `SELECT pg_advisory_xact_lock_shared(hashtext('floodgate.history'), hashtext($1 || '.route'))`
	lockRouteExclusive = `SELECT pg_advisory_xact_lock(hashtext('floodgate.history'), hashtext($1 || '.route'))`
)

// LockRoute takes the routing lock of the history exclusively, for the
// rest of tx: no sink writes until tx ends. Whoever moves rows between
// tiers or changes a watermark holds it.
func LockRoute(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, lockRouteExclusive, migrations.Schema); err != nil {
		return fmt.Errorf("routing lock: %w", err)
	}
	return nil
}

// EnsureLadder stores l as the ladder of the history. An empty
// store takes l as is. A stored ladder with the same steps takes l's
// horizons. Otherwise steps may be added (a new tier starts with its finer
// neighbour's watermark, so it receives nothing until the roller fills it)
// and removed only when their table is empty. With onlyIfEmpty, a stored
// ladder is left untouched (the sink's bootstrap; the roller is the
// authority on horizons).
func EnsureLadder(ctx context.Context, db DB, l Ladder, onlyIfEmpty bool) (err error) {
	if err := l.Validate(); err != nil {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("ensure ladder: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(ctx)
		}
	}()
	if _, err := tx.Exec(ctx, lockRouteExclusive, migrations.Schema); err != nil {
		return fmt.Errorf("ensure ladder: lock: %w", err)
	}
	have, err := storedTiers(ctx, tx)
	if err != nil {
		return err
	}
	if len(have) > 0 && onlyIfEmpty {
		return tx.Commit(ctx)
	}
	if err := keepsEveryUsedTier(ctx, tx, l, have); err != nil {
		return err
	}
	if err := storeLadder(ctx, tx, l, have); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("ensure ladder: commit: %w", err)
	}
	return nil
}

// storedTier is a row of history_tiers: a tier's step and how far it is
// rolled.
type storedTier struct{ step, rolledTo string }

// storedTiers reads the ladder stored, in order.
func storedTiers(ctx context.Context, tx pgx.Tx) ([]storedTier, error) {
	tiers := qualify("history_tiers")
	rows, err := tx.Query(ctx, `SELECT step, rolled_to::text FROM `+tiers+` ORDER BY position`)
	if err != nil {
		return nil, fmt.Errorf("ensure ladder: read %s: %w", tiers, err)
	}
	have, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (storedTier, error) {
		var t storedTier
		err := row.Scan(&t.step, &t.rolledTo)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("ensure ladder: read %s: %w", tiers, err)
	}
	return have, nil
}

// keepsEveryUsedTier refuses a ladder that leaves out a stored tier
// holding data.
func keepsEveryUsedTier(ctx context.Context, tx pgx.Tx, l Ladder, have []storedTier) error {
	wanted := map[string]bool{}
	for _, t := range l {
		wanted[t.Name] = true
	}
	for _, st := range have {
		if wanted[st.step] {
			continue
		}
		var used bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+qualify("bucket_"+st.step)+`)`).Scan(&used); err != nil {
			return fmt.Errorf("ensure ladder: check tier %s: %w", st.step, err)
		}
		if used {
			return fmt.Errorf("ensure ladder %s: stored tier %s still holds data; keep it in the ladder (stored: %s)", l, st.step, describe(have, func(s storedTier) string { return s.step }))
		}
	}
	return nil
}

// storeLadder replaces the stored ladder with l; a tier kept keeps how far
// it is rolled, a new one starts where the tier before it stands.
func storeLadder(ctx context.Context, tx pgx.Tx, l Ladder, have []storedTier) error {
	tiers := qualify("history_tiers")
	watermark := map[string]string{}
	for _, st := range have {
		watermark[st.step] = st.rolledTo
	}
	if _, err := tx.Exec(ctx, `DELETE FROM `+tiers); err != nil {
		return fmt.Errorf("ensure ladder: clear: %w", err)
	}
	prev := "-infinity"
	for i, t := range l {
		w, ok := watermark[t.Name]
		if !ok {
			w = prev
		}
		var horizon any
		if !t.Forever() {
			horizon = t.Horizon
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+tiers+` (step, position, width, horizon, rolled_to) VALUES ($1, $2, $3, $4, $5::timestamptz)`,
			t.Name, i, t.Width, horizon, w); err != nil {
			return fmt.Errorf("ensure ladder: store tier %s: %w", t.Name, err)
		}
		prev = w
	}
	return nil
}

func describe[T any](xs []T, f func(T) string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = f(x)
	}
	return strings.Join(parts, ",")
}
