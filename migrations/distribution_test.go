package migrations_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/migrations"
)

// distributionExempt are the tables a distributed history does not shard
// by subject (docs/scaling.md, "History past one PostgreSQL"): reference
// data every node holds whole, the offsets each sink stores with its
// buckets (sharded by their own key: the group, topic and partition), and
// the dedup ids (an event id names one event of one subject: sharded by the
// id itself).
var distributionExempt = map[string]string{
	"consumer_offsets": "offsets: one row per group, topic and partition",
	"history_tiers":    "reference: the ladder",
	"history_expired":  "reference: what the roller deleted",
	"history_ids":      "sharded by event id",
	"goose_db_version": "the migration tool's own",
}

// TestEveryKeyHoldsTheDistributionKey keeps history ready to be spread over
// several PostgreSQL servers (Citus distributed tables, or one server per
// group of partitions) at no cost today: every primary key and unique index
// of a history table holds subject, the column such a history shards by,
// so each is enforceable on one shard. A migration that adds a key
// without it fails here, and must say why in distributionExempt.
func TestEveryKeyHoldsTheDistributionKey(t *testing.T) {
	dbURL := tempDatabase(t, stacktest.PostgresURL(t))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	db, err := migrations.Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryContext(context.Background(), `
SELECT c.relname, i.relname, array_agg(a.attname::text ORDER BY a.attname)
FROM pg_index x
JOIN pg_class c ON c.oid = x.indrelid
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY (x.indkey)
WHERE n.nspname = 'floodgate' AND (x.indisunique OR x.indisprimary)
GROUP BY c.relname, i.relname
ORDER BY c.relname, i.relname`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	checked := 0
	for rows.Next() {
		var table, index string
		var cols []string
		var raw string
		if err := rows.Scan(&table, &index, &raw); err != nil {
			t.Fatal(err)
		}
		cols = strings.Split(strings.Trim(raw, "{}"), ",")
		if _, ok := distributionExempt[table]; ok {
			continue
		}
		checked++
		if !slices.Contains(cols, "subject") {
			t.Errorf("table %s, unique index %s on %v: no subject, so it cannot be enforced per shard of a distributed history", table, index, cols)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("only %d unique indexes checked: the query no longer sees the history tables", checked)
	}
	t.Logf("%d unique indexes of history tables hold subject", checked)
}
