// Package historytest gives integration tests a PostgreSQL database of
// their own, with floodgate's migrations applied exactly as `floodgate
// migrate up` applies them, so tests of history, the roller, the query
// command and the dashboard never see each other's watermarks or rows.
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

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/migrations"
)

// Pool creates a database of the test's own on the stack's PostgreSQL
// (stacktest.PostgresURL: the test fails when it does not answer, skips
// only under -short), applies floodgate's migrations to it
// (migrations.CreateDatabase) and returns a pool on it. The pool is closed
// and the database dropped when the test ends, unless FLOODGATE_KEEP_DB is
// set. pool.Config().ConnString() is the database's URL, for processes.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return database(tb, stacktest.PostgresURL(tb))
}

// ReaderPool returns a pool on pool's database whose every session runs
// as migrations.ReaderRole (SET ROLE), as a dashboard logging in as a
// member of it does: what it may not read fails with permission denied.
// It is closed when the test ends.
func ReaderPool(tb testing.TB, pool *pgxpool.Pool) *pgxpool.Pool {
	tb.Helper()
	cfg := pool.Config()
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+migrations.ReaderRole)
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reader, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = reader.Ping(ctx)
	}
	if err != nil {
		tb.Fatalf("postgres pool as %s: %v", migrations.ReaderRole, err)
	}
	tb.Cleanup(reader.Close)
	return reader
}

// database creates and migrates a fresh database on the server of
// serverURL and returns a pool on it.
func database(tb testing.TB, serverURL string) *pgxpool.Pool {
	tb.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "fgtest_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, err := migrations.CreateDatabase(ctx, serverURL, name)
	if err != nil {
		tb.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		tb.Fatalf("postgres database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		pool.Close()
		if os.Getenv("FLOODGATE_KEEP_DB") != "" {
			tb.Logf("kept database %s", name)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := migrations.DropDatabase(ctx, serverURL, name); err != nil {
			tb.Logf("drop database %s: %v", name, err)
		}
	})
	return pool
}
