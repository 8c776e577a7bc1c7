package history_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
)

func testHasher(t *testing.T, key string) *history.Hasher {
	t.Helper()
	h, err := history.NewHasher([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHasher(t *testing.T) {
	h := testHasher(t, "0123456789abcdef0123456789abcdef")
	a := h.Subject("alice@example.com")
	if !strings.HasPrefix(a, history.HashPrefix) || len(a) != 25 || !history.IsHashed(a) {
		t.Fatalf("hash %q: want ~h: and 22 base64url characters", a)
	}
	if h.Subject("alice@example.com") != a {
		t.Error("hash not stable")
	}
	if h.Subject(a) != a {
		t.Error("a hash is not hashed again (an operator names a subject by its hash)")
	}
	if h.Subject("bob@example.com") == a {
		t.Error("two subjects, one hash")
	}
	if testHasher(t, "another key of at least 16 bytes").Subject("alice@example.com") == a {
		t.Error("the hash does not depend on the key")
	}
	long := strings.Repeat("x", 300) // stored as its digest: hashed as such
	if h.Subject(long) != h.Subject(event.CanonicalSubject(long)) {
		t.Error("an overlong subject is not hashed as its canonical digest")
	}
	if history.IsHashed(event.CanonicalSubject(long)) {
		t.Error("a ~sha256: digest taken for a hash")
	}
	if _, err := history.NewHasher([]byte("short")); err == nil {
		t.Error("a 5-byte key accepted")
	}
	if _, err := history.NewPrivacy(map[string]history.Storage{"email": history.StoreHash, "link": history.StoreDrop}, nil, nil); err == nil ||
		!strings.Contains(err.Error(), "email") || !strings.Contains(err.Error(), "--history-key-file") {
		t.Errorf("hash without a key: err %v, want one naming the kind and the flag", err)
	}
	if _, err := history.NewPrivacy(map[string]history.Storage{"link": history.StoreDrop}, nil, nil); err != nil {
		t.Errorf("drop needs no key: %v", err)
	}
}

// subjectRows returns "kind subject n" of every row of a table.
func subjectRows(t *testing.T, db history.DB, table string) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT kind || ' ' || subject || ' ' || n FROM `+
		pgx.Identifier{"floodgate", table}.Sanitize()+` ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A sink with a policy stores hashed kinds by their hash and dropped kinds
// not at all; a querier with the key finds the hashed subject by its
// value; Erase removes a subject from every table, under both forms, and
// a second erase removes nothing.
func TestSinkPrivacyAndErase(t *testing.T) {
	pool := historytest.Pool(t)
	ctx := context.Background()
	h := testHasher(t, "0123456789abcdef0123456789abcdef")
	p, err := history.NewPrivacy(map[string]history.Storage{"email": history.StoreHash, "link": history.StoreDrop}, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: "test-history",
		Privacy: func() (*history.Privacy, error) { return p, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	b := consume.Batch{Topic: "t", Partition: 0, First: 0, Last: 4, Records: []consume.Record{
		rec(0, "login_failed", "email", "a@x", t0, 1),
		rec(1, "login_failed", "email", "a@x", t0.Add(time.Minute), 2),
		rec(2, "login_failed", "ip", "192.0.2.1", t0, 1),
		rec(3, "visit", "link", "l1", t0, 7),
		rec(4, "visit", "email", "a@x", t0, 1),
	}}
	if err := s.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	ha := h.Subject("a@x")
	want := []string{"email " + ha + " 1", "email " + ha + " 1", "email " + ha + " 2", "ip 192.0.2.1 1"}
	if got := subjectRows(t, pool, "bucket_1m"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("minute rows %q, want %q (email hashed, link dropped)", got, want)
	}
	// Rows of a. stored raw before the policy hashed e-mails: the querier
	// and erase find both.
	if _, err := pool.Exec(ctx, `INSERT INTO floodgate.history_totals (action, subject, kind, n, first_at, last_at) VALUES ('login_failed', 'a@x', 'email', 10, $1, $1)`, t0.Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	k := history.Key{Action: "login_failed", Kind: "email", Subject: "a@x"}
	if n, err := history.NewQuerier(pool).WithHasher(h).Count(ctx, k, t0, t0.Add(time.Hour)); err != nil || n != 3 {
		t.Errorf("count with the key = %d, %v; want 3", n, err)
	}
	if n, err := history.NewQuerier(pool).WithHasher(h).Total(ctx, k); err != nil || n != 13 {
		t.Errorf("total with the key = %d, %v; want 13 (3 hashed, 10 raw)", n, err)
	}
	if n, err := history.NewQuerier(pool).Count(ctx, k, t0, t0.Add(time.Hour)); err != nil || n != 0 {
		t.Errorf("count without the key = %d, %v; want 0", n, err)
	}

	got, err := history.Erase(ctx, pool, h, nil, "email", "a@x", "login_failed")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]int64{}
	for _, e := range got {
		rows[e.Table] = e.Rows
	}
	if rows["bucket_1m"] != 2 || rows["history_totals"] != 2 || len(got) != 7 {
		t.Errorf("erase: %+v; want 2 minute rows and 2 totals (hashed and raw) of 7 tables", got)
	}
	want = []string{"email " + ha + " 1", "ip 192.0.2.1 1"} // visit's row: another action
	if got := subjectRows(t, pool, "bucket_1m"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("after erase: %q, want %q", got, want)
	}
	if _, err := history.Erase(ctx, pool, h, nil, "email", "a@x", ""); err != nil {
		t.Fatal(err)
	}
	again, err := history.Erase(ctx, pool, h, nil, "email", "a@x", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range again {
		if e.Rows != 0 {
			t.Errorf("second erase removed %d rows of %s, want none", e.Rows, e.Table)
		}
	}
	if got := subjectRows(t, pool, "history_totals"); strings.Join(got, "|") != "ip 192.0.2.1 1" {
		t.Errorf("totals after erasing every action: %q", got)
	}
}
