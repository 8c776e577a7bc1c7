package history_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/rules"
)

// Issue 51: history stores a subject as the live path counts it,
// normalized by the rules file (rules.Set.Normalize; IPv6 addresses kept
// whole), hashed kinds hashed after; a visitor value too. A query or an
// erase naming any spelling finds the normalized rows and those written
// under the spelling named (before the upgrade).
func TestSinkStoresSubjectsNormalized(t *testing.T) {
	set, err := rules.Parse([]byte("rules: []\nkinds:\n  user: {normalize: [trim, lower]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, hashed := range []bool{false, true} {
		t.Run(map[bool]string{false: "raw", true: "hashed"}[hashed], func(t *testing.T) {
			pool := historytest.Pool(t)
			ctx := context.Background()
			h := testHasher(t, "0123456789abcdef0123456789abcdef")
			kinds := map[string]history.Storage{}
			stored := func(s string) string { return s }
			if hashed {
				kinds["email"] = history.StoreHash
				stored = h.Subject
			}
			p, err := history.NewPrivacy(kinds, h, set)
			if err != nil {
				t.Fatal(err)
			}
			s, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: "test-history", Visitors: history.Visitors{"visit": "email"},
				Privacy: func() (*history.Privacy, error) { return p, nil }})
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
			visit := func(off int64, email string) consume.Record {
				return consume.Record{Offset: off, Event: event.Event{V: 1, ID: event.NewID(), Action: "visit", Kind: "link", Subject: "l1", TS: t0, N: 1,
					Attrs: map[string]string{"email": email}}}
			}
			b := consume.Batch{Topic: "t", Partition: 0, First: 0, Last: 7, Records: []consume.Record{
				rec(0, "login_failed", "email", "Victim@x.example", t0, 1),
				rec(1, "login_failed", "email", " VICTIM@X.EXAMPLE", t0, 2),
				rec(2, "login_failed", "ip", "::ffff:192.0.2.1", t0, 1),
				rec(3, "login_failed", "ip", "2001:DB8::1", t0, 1),
				rec(4, "login_failed", "user", "Bob ", t0, 1),
				rec(5, "login_failed", "link", "L1", t0, 1),
				visit(6, "Eve@x.example"), visit(7, "eve@x.example "),
			}}
			if err := s.Apply(ctx, b); err != nil {
				t.Fatal(err)
			}
			want := []string{"email " + stored("victim@x.example") + " 3", "ip 192.0.2.1 1", "ip 2001:db8::1 1", "link L1 1", "link l1 2", "user bob 1"}
			if got := subjectRows(t, pool, "bucket_1m"); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("minute rows %q, want %q", got, want)
			}
			l1 := history.Key{Action: "visit", Kind: "link", Subject: "l1"}
			if n, err := history.NewQuerier(pool).Visitors(ctx, l1, t0, t0.Add(time.Hour)); err != nil || n != 1 {
				t.Errorf("visitors of l1 = %d, %v; want 1 (two spellings of eve@x.example)", n, err)
			}

			// A row written before the upgrade, under a spelling of its own.
			if _, err := pool.Exec(ctx, `INSERT INTO floodgate.history_totals (action, subject, kind, n, first_at, last_at) VALUES ('login_failed', $1, 'email', 10, $2, $2)`,
				stored("Victim@x.example"), t0.Add(-48*time.Hour)); err != nil {
				t.Fatal(err)
			}
			q := history.NewQuerier(pool).WithHasher(h).WithNormalizer(set)
			for spelling, want := range map[string]int64{"Victim@x.example": 13, "VICTIM@x.example": 3, "victim@x.example": 3} {
				k := history.Key{Action: "login_failed", Kind: "email", Subject: spelling}
				if n, err := q.Total(ctx, k); err != nil || n != want {
					t.Errorf("total of %q = %d, %v; want %d", spelling, n, err, want)
				}
			}
			if n, err := q.Count(ctx, history.Key{Action: "login_failed", Kind: "ip", Subject: "::FFFF:192.0.2.1"}, t0, t0.Add(time.Hour)); err != nil || n != 1 {
				t.Errorf("count of ip ::FFFF:192.0.2.1 = %d, %v; want 1", n, err)
			}
			if n, err := history.NewQuerier(pool).WithHasher(h).Total(ctx, history.Key{Action: "login_failed", Kind: "email", Subject: "VICTIM@x.example"}); err != nil || n != 0 {
				t.Errorf("total without the normalizer = %d, %v; want 0 (looked up as given)", n, err)
			}

			got, err := history.Erase(ctx, pool, h, set, "email", "Victim@X.example ", "")
			if err != nil {
				t.Fatal(err)
			}
			rows := map[string]int64{}
			for _, e := range got {
				rows[e.Table] = e.Rows
			}
			if rows["bucket_1m"] != 1 || rows["history_totals"] != 1 {
				t.Errorf("erase of another spelling: %+v; want the normalized minute row and total", got)
			}
			got, err = history.Erase(ctx, pool, h, set, "email", "Victim@x.example", "")
			if err != nil {
				t.Fatal(err)
			}
			if n, err := q.Total(ctx, history.Key{Action: "login_failed", Kind: "email", Subject: "Victim@x.example"}); err != nil || n != 0 {
				t.Errorf("after erasing the old spelling too: total %d, %v (%+v)", n, err, got)
			}
		})
	}
}
