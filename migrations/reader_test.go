package migrations_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/migrations"
)

// asReader runs query as floodgate_reader (SET ROLE in a transaction
// rolled back after) and returns its error.
func asReader(ctx context.Context, db *sql.DB, query string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SET LOCAL ROLE `+migrations.ReaderRole); err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

func denied(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// floodgate_reader reads what the dashboards read, and nothing else: no
// write, no offsets, no dedup ids, no DDL.
func TestReaderRole(t *testing.T) {
	dbURL := tempDatabase(t, stacktest.PostgresURL(t))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	db, err := migrations.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for range 2 { // the second Up applies nothing and grants again
		if _, err := migrations.Up(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := migrations.HasReader(ctx, db); err != nil || !ok {
		t.Fatalf("HasReader: %v, %v", ok, err)
	}
	for _, q := range []string{
		`SELECT * FROM floodgate.actions()`,
		`SELECT floodgate.total('visit', NULL)`,
		`SELECT floodgate.count('visit', NULL, now() - interval '1 day', now())`,
		`SELECT * FROM floodgate.curve('visit', NULL, now() - interval '1 hour', now(), interval '1 minute')`,
		`SELECT * FROM floodgate.top('visit', now() - interval '1 day', now(), 10)`,
		`SELECT * FROM floodgate.top('visit', NULL, NULL, 10)`,
		`SELECT floodgate.visitors('visit', NULL, now() - interval '1 day', now())`,
		`SELECT floodgate.total_visitors('visit', NULL)`,
		`SELECT * FROM floodgate.visitors_curve('visit', NULL, now() - interval '1 hour', now(), interval '1 minute')`,
		`SELECT * FROM floodgate.top_visitors('visit', now() - interval '1 day', now(), 10)`,
		`SELECT floodgate.sketch_estimate(floodgate.sketch_union_agg(visitors)) FROM floodgate.buckets`,
		`SELECT * FROM floodgate.history_tiers`,
		`SELECT * FROM floodgate.history_late`,
		`SELECT * FROM floodgate.history_expired`,
	} {
		if err := asReader(ctx, db, q); err != nil {
			t.Errorf("as %s: %s: %v", migrations.ReaderRole, q, err)
		}
	}
	for _, q := range []string{
		`SELECT * FROM floodgate.consumer_offsets`,
		`SELECT * FROM floodgate.history_ids`,
		`SELECT * FROM floodgate.bucket_1m`,
		`INSERT INTO floodgate.history_late (action, subject, kind, n) VALUES ('visit', 'x', 'ip', 1)`,
		`UPDATE floodgate.history_tiers SET rolled_to = now()`,
		`DELETE FROM floodgate.history_totals`,
		`SELECT floodgate.ensure_partition('1m', now())`,
		`SELECT floodgate.grant_reader('floodgate_reader')`,
		`CREATE TABLE floodgate.x (a int)`,
	} {
		if err := asReader(ctx, db, q); !denied(err) {
			t.Errorf("as %s: %s: %v; want permission denied", migrations.ReaderRole, q, err)
		}
	}
}

// A migrating user that owns its database but may not create roles (no
// superuser, no CREATEROLE: some managed servers) migrates all the same;
// once an administrator made the role, the next Up grants it. On a server
// of the test's own: roles belong to the server, and the stack's has the
// role already.
func TestReaderRoleWithoutCreateRole(t *testing.T) {
	srv := historytest.StartPostgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	admin, err := migrations.Open(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var b [4]byte
	_, _ = rand.Read(b[:])
	user := "fgmig_" + hex.EncodeToString(b[:])
	for _, q := range []string{`CREATE ROLE ` + user + ` LOGIN NOSUPERUSER NOCREATEROLE`, `CREATE DATABASE ` + user + ` OWNER ` + user} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User, u.Path = url.User(user), "/"+user
	db, err := migrations.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := migrations.Up(ctx, db); err != nil {
		t.Fatalf("Up as a user who may not create roles: %v", err)
	}
	if ok, err := migrations.HasReader(ctx, db); err != nil || ok {
		t.Fatalf("HasReader after Up without CREATEROLE: %v, %v; want false", ok, err)
	}
	if _, err := admin.ExecContext(ctx, `CREATE ROLE `+migrations.ReaderRole+` NOLOGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Up(ctx, db); err != nil {
		t.Fatalf("Up after the role was made: %v", err)
	}
	var granted bool
	if err := db.QueryRowContext(ctx, `SELECT has_table_privilege($1, 'floodgate.history_totals', 'SELECT')
		AND has_function_privilege($1, 'floodgate.actions()', 'EXECUTE') AND has_schema_privilege($1, 'floodgate', 'USAGE')`,
		migrations.ReaderRole).Scan(&granted); err != nil || !granted {
		t.Fatalf("grants to %s after the next Up: %v, %v", migrations.ReaderRole, granted, err)
	}
}

// Databases of one server migrated at once (test packages in parallel on a
// fresh server) race to make the role: each Up succeeds, and each
// database grants it.
func TestReaderRoleMadeByConcurrentMigrations(t *testing.T) {
	srv := historytest.StartPostgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			db, err := migrations.Open(ctx, tempDatabase(t, srv.URL))
			if err != nil {
				t.Error(err)
				return
			}
			defer db.Close()
			if _, err := migrations.Up(ctx, db); err != nil {
				t.Errorf("Up #%d: %v", i, err)
				return
			}
			if err := asReader(ctx, db, `SELECT * FROM floodgate.actions()`); err != nil {
				t.Errorf("database #%d as %s: %v", i, migrations.ReaderRole, err)
			}
		})
	}
	wg.Wait()
}
