package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// Schema holds every floodgate object and goose's version table.
const Schema = "floodgate"

// VersionTable records the applied migrations.
const VersionTable = Schema + ".goose_db_version"

// ReaderRole is the NOLOGIN role holding what the dashboards read
// (migration 00007): Grafana's and `floodgate dashboard`'s login roles are
// members of it.
const ReaderRole = "floodgate_reader"

//go:embed *.sql
var files embed.FS

// FS returns the embedded migration files.
func FS() fs.FS { return files }

// Applied is one migration that Up applied.
type Applied struct {
	Version  int64
	Name     string // file name, e.g. "00001_offsets.sql"
	Duration time.Duration
}

// Migration is the state of one migration file in a database.
type Migration struct {
	Version   int64
	Name      string
	Applied   bool
	AppliedAt time.Time // zero when pending
}

// Open opens url (a postgres:// URL or DSN) with pgx's database/sql driver
// and pings it.
func Open(ctx context.Context, url string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	if err := db.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("connect to postgres %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database, err), db.Close())
	}
	return db, nil
}

// Up creates schema floodgate if needed and applies every pending migration
// in order, each in its own transaction. It returns what it applied (empty
// when the database was up to date).
func Up(ctx context.Context, db *sql.DB) ([]Applied, error) {
	if err := createSchema(ctx, db); err != nil {
		return nil, err
	}
	p, err := provider(db)
	if err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	var partial *goose.PartialError
	if errors.As(err, &partial) {
		results = partial.Applied
	}
	applied := make([]Applied, 0, len(results))
	for _, r := range results {
		if r.Error == nil {
			applied = append(applied, Applied{Version: r.Source.Version, Name: path.Base(r.Source.Path), Duration: r.Duration})
		}
	}
	switch {
	case partial != nil && partial.Failed != nil:
		return applied, fmt.Errorf("migrate up: %s: %w", path.Base(partial.Failed.Source.Path), partial.Err)
	case err != nil:
		return applied, fmt.Errorf("migrate up: %w", err)
	}
	return applied, grantReader(ctx, db)
}

// grantReader grants ReaderRole what the dashboards read
// (floodgate.grant_reader, migration 00007), when the role exists and the
// user migrating owns the schema: a role an administrator made after the
// migration ran gets its grants at the next Up. GRANTs of the same object
// at once fail ("tuple concurrently updated"), so migrators take turns.
func grantReader(ctx context.Context, db *sql.DB) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate up: grant %s: begin: %w", ReaderRole, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('floodgate.migrations.reader'))`); err != nil {
		return fmt.Errorf("migrate up: grant %s: lock: %w", ReaderRole, err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT `+Schema+`.grant_reader($1)
WHERE to_regrole($1) IS NOT NULL
  AND pg_has_role((SELECT nspowner FROM pg_namespace WHERE nspname = $2), 'USAGE')`, ReaderRole, Schema); err != nil {
		return fmt.Errorf("migrate up: grant %s: %w", ReaderRole, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate up: grant %s: commit: %w", ReaderRole, err)
	}
	return nil
}

// HasReader reports whether ReaderRole exists on the server (migration
// 00007 makes it when the migrating user may create roles).
func HasReader(ctx context.Context, db *sql.DB) (bool, error) {
	var ok bool
	if err := db.QueryRowContext(ctx, `SELECT to_regrole($1) IS NOT NULL`, ReaderRole).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up role %s: %w", ReaderRole, err)
	}
	return ok, nil
}

// createSchema creates schema floodgate if needed. Concurrent CREATE SCHEMA
// IF NOT EXISTS race on the catalog's unique index (23505), so creators take
// turns under a transaction-level advisory lock: a waiter's statement then
// sees the committed schema.
func createSchema(ctx context.Context, db *sql.DB) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate up: create schema %s: begin: %w", Schema, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('floodgate.migrations.schema'))`); err != nil {
		return fmt.Errorf("migrate up: create schema %s: lock: %w", Schema, err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS `+Schema); err != nil {
		return fmt.Errorf("migrate up: create schema %s: %w", Schema, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate up: create schema %s: commit: %w", Schema, err)
	}
	return nil
}

// Status lists every embedded migration with whether it is applied. It
// does not write: on a database never migrated, all are pending.
func Status(ctx context.Context, db *sql.DB) ([]Migration, error) {
	p, err := provider(db)
	if err != nil {
		return nil, err
	}
	var table sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1)::text`, VersionTable).Scan(&table); err != nil {
		return nil, fmt.Errorf("migrate status: look up %s: %w", VersionTable, err)
	}
	if !table.Valid {
		var out []Migration
		for _, s := range p.ListSources() {
			out = append(out, Migration{Version: s.Version, Name: path.Base(s.Path)})
		}
		return out, nil
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate status: %w", err)
	}
	out := make([]Migration, 0, len(st))
	for _, s := range st {
		out = append(out, Migration{
			Version:   s.Source.Version,
			Name:      path.Base(s.Source.Path),
			Applied:   s.State == goose.StateApplied,
			AppliedAt: s.AppliedAt,
		})
	}
	return out, nil
}

func provider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migrations: session locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files,
		goose.WithTableName(VersionTable),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}
