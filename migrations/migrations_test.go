package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/migrations"
)

var fileName = regexp.MustCompile(`^(\d{5})_[a-z0-9_]+\.sql$`)

// TestFilesSequential keeps the numbering contiguous from 00001, one file
// per number, each with a goose Up section.
func TestFilesSequential(t *testing.T) {
	names, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no embedded migrations")
	}
	slices.Sort(names)
	for i, name := range names {
		m := fileName.FindStringSubmatch(name)
		if m == nil {
			t.Errorf("%s: want NNNNN_lowercase_name.sql", name)
			continue
		}
		if v, _ := strconv.Atoi(m[1]); v != i+1 {
			t.Errorf("%s: version %d, want %d (sequential, no gaps or duplicates)", name, v, i+1)
		}
		src, err := fs.ReadFile(migrations.FS(), name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), "-- +goose Up") {
			t.Errorf("%s: no -- +goose Up annotation", name)
		}
	}
}

// tempDatabase creates an empty database on the stack's server, dropped
// when the test ends, and returns its URL.
func tempDatabase(tb testing.TB, baseURL string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	defer cancel()
	admin, err := migrations.Open(ctx, baseURL)
	if err != nil {
		tb.Fatalf("PostgreSQL unreachable (run scripts/stack up, or set FLOODGATE_POSTGRES_URL): %v", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "floodgate_migtest_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		tb.Fatalf("create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			tb.Errorf("drop database %s: %v", name, err)
		}
		if err := admin.Close(); err != nil {
			tb.Errorf("close admin connection: %v", err)
		}
	})
	u, err := url.Parse(baseURL)
	if err != nil {
		tb.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

func TestUpTwiceAndStatus(t *testing.T) {
	dbURL := tempDatabase(t, stacktest.PostgresURL(t))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	db, err := migrations.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close db: %v", err)
		}
	})
	files, _ := fs.Glob(migrations.FS(), "*.sql")

	// Status on a fresh database: all pending, and nothing written.
	st, err := migrations.Status(ctx, db)
	if err != nil {
		t.Fatalf("Status before Up: %v", err)
	}
	if len(st) != len(files) || st[0].Version != 1 || st[0].Name != "00001_offsets.sql" || st[0].Applied {
		t.Fatalf("Status before Up = %+v", st)
	}
	var schemas int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'floodgate'`).Scan(&schemas); err != nil || schemas != 0 {
		t.Fatalf("Status created schema floodgate (count %d, err %v)", schemas, err)
	}

	applied, err := migrations.Up(ctx, db)
	if err != nil {
		t.Fatalf("first Up: %v", err)
	}
	if len(applied) != len(files) {
		t.Fatalf("first Up applied %+v, want %d migrations", applied, len(files))
	}
	for i, a := range applied {
		if a.Version != int64(i+1) {
			t.Errorf("applied[%d] = %+v, want version %d", i, a, i+1)
		}
	}

	applied, err = migrations.Up(ctx, db)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second Up = %+v, %v; want nothing applied, no error", applied, err)
	}

	st, err = migrations.Status(ctx, db)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	for _, m := range st {
		if !m.Applied || m.AppliedAt.IsZero() {
			t.Errorf("Status: %+v, want applied", m)
		}
	}
	if st[0].Version != 1 || st[0].Name != "00001_offsets.sql" {
		t.Errorf("Status[0] = %+v", st[0])
	}

	// The offsets table works as the consumers use it.
	upsert := `INSERT INTO floodgate.consumer_offsets (consumer_group, topic, "partition", next_offset)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (consumer_group, topic, "partition") DO UPDATE SET next_offset = excluded.next_offset, updated_at = now()`
	for _, off := range []int64{10, 42} {
		if _, err := db.ExecContext(ctx, upsert, "g", "floodgate.events", 3, off); err != nil {
			t.Fatalf("upsert offset: %v", err)
		}
	}
	var next int64
	if err := db.QueryRowContext(ctx, `SELECT next_offset FROM floodgate.consumer_offsets WHERE consumer_group = 'g' AND topic = 'floodgate.events' AND "partition" = 3`).Scan(&next); err != nil || next != 42 {
		t.Errorf("next_offset = %d, %v; want 42", next, err)
	}
	if _, err := db.ExecContext(ctx, upsert, "g", "floodgate.events", -1, 0); err == nil {
		t.Error("negative partition accepted")
	}
	var vt string
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('floodgate.goose_db_version')::text`).Scan(&vt); err != nil || vt == "" {
		t.Errorf("version table floodgate.goose_db_version: %q, %v", vt, err)
	}
}

func TestUpConcurrent(t *testing.T) {
	dbURL := tempDatabase(t, stacktest.PostgresURL(t))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	files, _ := fs.Glob(migrations.FS(), "*.sql")
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
	)
	for i := range 3 {
		wg.Go(func() {
			db, err := migrations.Open(ctx, dbURL)
			if err != nil {
				t.Error(err)
				return
			}
			defer func() {
				if err := db.Close(); err != nil {
					t.Errorf("close db %d: %v", i, err)
				}
			}()
			applied, err := migrations.Up(ctx, db)
			if err != nil {
				t.Errorf("Up #%d: %v", i, err)
				return
			}
			mu.Lock()
			total += len(applied)
			mu.Unlock()
		})
	}
	wg.Wait()
	if total != len(files) {
		t.Errorf("3 concurrent Up applied %d migrations in total, want each of the %d once", total, len(files))
	}
}
