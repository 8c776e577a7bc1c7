package migrations

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs SQL; *pgxpool.Pool, *pgx.Conn and pgx.Tx implement it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

var qualified = regexp.MustCompile(`\bfloodgate\.`)

// InstallHistory creates schema and applies history's migrations to it
// instead of schema floodgate: the Up sections of the files from 00002 on
// named *history*, with "floodgate." rewritten, after a consumer_offsets
// table shaped like 00001's. No goose version table: for tests and
// benchmarks that need a history of their own beside the real one (every
// history object is schema-qualified, so the rewrite is the whole change).
func InstallHistory(ctx context.Context, db Execer, schema string) error {
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := db.Exec(ctx, `CREATE SCHEMA `+q+`;
CREATE TABLE `+q+`.consumer_offsets (
	consumer_group text NOT NULL, topic text NOT NULL, "partition" int NOT NULL,
	next_offset bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (consumer_group, topic, "partition"))`); err != nil {
		return fmt.Errorf("install history into %s: create schema: %w", schema, err)
	}
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		if name < "00002" || !strings.Contains(name, "history") {
			continue
		}
		src, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		up := string(src)
		if i := strings.Index(up, "-- +goose Down"); i >= 0 {
			up = up[:i]
		}
		up = strings.ReplaceAll(up, "CREATE SCHEMA IF NOT EXISTS floodgate;", "")
		up = qualified.ReplaceAllString(up, schema+".")
		if _, err := db.Exec(ctx, up); err != nil {
			return fmt.Errorf("install history into %s: %s: %w", schema, name, err)
		}
	}
	return nil
}
