// Package historytest gives integration tests a PostgreSQL pool of the local
// stack and a private schema holding history's migrations, so tests of
// history, the roller and the query command never see each other's
// watermarks or rows.
package historytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"floodgate/migrations"
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
// like migration 00001's (migrations.InstallHistory). It is dropped when the test ends unless
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

// Install applies history's migrations to schema (migrations.InstallHistory).
func Install(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	return migrations.InstallHistory(ctx, pool, schema)
}
