// Package historytest gives integration tests a PostgreSQL pool of the local
// stack and a private schema holding history's migrations, so tests of
// history, the roller and the query command never see each other's
// watermarks or rows.
package historytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"floodgate/stacktest"
)

// Pool connects to the stack's database (stacktest.PostgresURL: the test
// fails when it does not answer, skips only under -short) and closes the
// pool when the test ends.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	url := stacktest.PostgresURL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		tb.Fatalf("postgres %s: %v", url, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		tb.Fatalf("postgres %s does not answer (start it with scripts/stack up): %v", url, err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Schema creates a fresh schema holding history's migrations (00002 and
// later, with "floodgate." rewritten) and a consumer_offsets table shaped
// like migration 00001's. It is dropped when the test ends unless
// FLOODGATE_KEEP_SCHEMA is set. The name is returned.
func Schema(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "fgtest_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	if err := Install(ctx, pool, name); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if os.Getenv("FLOODGATE_KEEP_SCHEMA") != "" {
			tb.Logf("kept schema %s", name)
			return
		}
		if _, err := pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{name}.Sanitize()+` CASCADE`); err != nil {
			tb.Logf("drop schema %s: %v", name, err)
		}
	})
	return name
}

var qualified = regexp.MustCompile(`\bfloodgate\.`)

// Install applies history's migrations to schema.
func Install(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	files, err := MigrationFiles()
	if err != nil {
		return err
	}
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+q+`;
CREATE TABLE `+q+`.consumer_offsets (
	consumer_group text NOT NULL, topic text NOT NULL, "partition" int NOT NULL,
	next_offset bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (consumer_group, topic, "partition"))`); err != nil {
		return fmt.Errorf("create schema %s: %w", schema, err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		up := string(src)
		if i := strings.Index(up, "-- +goose Down"); i >= 0 {
			up = up[:i]
		}
		up = strings.ReplaceAll(up, "CREATE SCHEMA IF NOT EXISTS floodgate;", "")
		up = qualified.ReplaceAllString(up, schema+".")
		if _, err := pool.Exec(ctx, up); err != nil {
			return fmt.Errorf("apply %s to schema %s: %w", filepath.Base(f), schema, err)
		}
	}
	return nil
}

// MigrationFiles lists history's migration files (00002 and later, named
// *history*), in order.
func MigrationFiles() ([]string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("historytest: cannot locate the source tree")
	}
	dir := filepath.Join(filepath.Dir(self), "..", "..", "migrations")
	all, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range all {
		if base := filepath.Base(f); base >= "00002" && strings.Contains(base, "history") {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("historytest: no history migrations under %s", dir)
	}
	return out, nil
}
