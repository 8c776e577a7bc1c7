package history_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
)

func visit(off int64, link, ip string, ts time.Time) consume.Record {
	e := event.Event{V: 1, ID: event.NewID(), Action: "visit", Kind: "link", Subject: link, TS: ts, N: 1}
	if ip != "" {
		e.Attrs = map[string]string{"ip": ip}
	}
	return consume.Record{Offset: off, Event: e}
}

// TestSinkKeepsVisitors applies visits with and without the counted attr,
// replays, and an overlapping batch, and checks visitors per bucket, range,
// step, key and all time: exact up to 256, within 2% above.
func TestSinkKeepsVisitors(t *testing.T) {
	pool := historytest.Pool(t)
	ctx := context.Background()
	s, err := history.NewSink(ctx, history.SinkConfig{
		DB: pool, Group: "test-visitors",
		Visitors: history.Visitors{"visit": "ip"},
	})
	if err != nil {
		t.Fatal(err)
	}
	q := history.NewQuerier(pool)
	t0 := time.Date(2030, 5, 6, 7, 8, 0, 0, time.UTC)

	// Link a: minute 0 visited by ip 1, 2, 2 and once without an ip;
	// minute 1 by ip 2 and 3. Link b: 300 visitors in minute 0 (its row
	// goes dense), ip 1 among them. A login_failed carrying an ip attr is
	// not counted: only visit is configured.
	b1 := consume.Batch{Topic: "t", Partition: 0, First: 0, Last: 5, Records: []consume.Record{
		visit(0, "a", "10.0.0.1", t0), visit(1, "a", "10.0.0.2", t0.Add(10*time.Second)),
		visit(2, "a", "10.0.0.2", t0.Add(20*time.Second)), visit(3, "a", "", t0.Add(30*time.Second)),
		{Offset: 4, Event: event.Event{V: 1, ID: event.NewID(), Action: "login_failed", Kind: "user", Subject: "bob", TS: t0, N: 1,
			Attrs: map[string]string{"ip": "10.0.0.9"}}},
		visit(5, "a", "10.0.0.2", t0.Add(time.Minute)),
	}}
	b2 := consume.Batch{Topic: "t", Partition: 0, First: 6, Last: 306}
	b2.Records = append(b2.Records, visit(6, "a", "10.0.0.3", t0.Add(time.Minute+time.Second)))
	for i := range 300 {
		ip := fmt.Sprintf("10.1.%d.%d", i/200, i%200)
		if i == 0 {
			ip = "10.0.0.1"
		}
		b2.Records = append(b2.Records, visit(int64(7+i), "b", ip, t0.Add(time.Duration(i)*100*time.Millisecond)))
	}
	for _, b := range []consume.Batch{b1, b1, b2, b2} { // each applied, then replayed
		if err := s.Apply(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// A stale owner's batch overlapping the stored offset: only its tail
	// (offset 307) is new, and brings ip 4 to link a.
	stale := consume.Batch{Topic: "t", Partition: 0, First: 300, Last: 307, Records: []consume.Record{
		visit(300, "a", "10.0.0.99", t0), visit(307, "a", "10.0.0.4", t0.Add(time.Minute)),
	}}
	if err := s.Apply(ctx, stale); err != nil {
		t.Fatal(err)
	}

	a := history.Key{Action: "visit", Kind: "link", Subject: "a"}
	bk := history.Key{Action: "visit", Kind: "link", Subject: "b"}
	from, to := t0, t0.Add(2*time.Minute)
	check := func(what string, got int64, err error, want int64) {
		t.Helper()
		if err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", what, got, err, want)
		}
	}
	// Above 256 visitors, the HyperLogLog estimate: within 2%.
	approx := func(what string, got int64, err error, want int64) {
		t.Helper()
		if err != nil || got < want*98/100 || got > want*102/100 {
			t.Errorf("%s = %d, %v; want %d within 2%%", what, got, err, want)
		}
	}
	n, err := q.Count(ctx, a, from, to)
	check("count a", n, err, 7)
	n, err = q.Visitors(ctx, a, from, to)
	check("visitors a", n, err, 4) // ips 1, 2, 3, 4
	n, err = q.Visitors(ctx, a, from, t0.Add(time.Minute))
	check("visitors a, minute 0", n, err, 2)
	n, err = q.Visitors(ctx, bk, from, to)
	approx("visitors b", n, err, 300)
	n, err = q.Visitors(ctx, history.Key{Action: "visit"}, from, to)
	approx("visitors of every link", n, err, 303) // b's 300 (ip 1 among them) and a's ips 2, 3, 4
	n, err = q.TotalVisitors(ctx, a)
	check("total visitors a", n, err, 4)
	n, err = q.Visitors(ctx, history.Key{Action: "login_failed"}, from, to)
	check("visitors of an action not configured", n, err, 0)

	curve, err := q.VisitorsCurve(ctx, a, from, to, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []history.VisitorPoint{{Time: t0, Events: 4, Visitors: 2}, {Time: t0.Add(time.Minute), Events: 3, Visitors: 3}}
	if fmt.Sprint(curve) != fmt.Sprint(want) {
		t.Errorf("visitors curve = %v, want %v", curve, want)
	}
	// Sketches are rewritten at every merge: the partitions compress them
	// with lz4 (migration 00005), new ones (ensure_partition) included.
	var methods []string
	if err := pool.QueryRow(ctx, `SELECT array_agg(coalesce(nullif(a.attcompression::text, ''), '-') || ':' || c.relname ORDER BY c.relname)
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace ns ON ns.oid = c.relnamespace
		WHERE ns.nspname = 'floodgate' AND a.attname = 'visitors' AND c.relkind = 'r'`).Scan(&methods); err != nil {
		t.Fatal(err)
	}
	if len(methods) < 7 { // history_totals, the 5 DEFAULT partitions, the 1m partition of t0
		t.Errorf("visitors columns: %v", methods)
	}
	for _, m := range methods {
		if !strings.HasPrefix(m, "l:") {
			t.Errorf("visitors column of %s not lz4-compressed (all: %v)", m, methods)
		}
	}
	for _, span := range []struct {
		name     string
		from, to time.Time
	}{{"range", from, to}, {"all time", time.Time{}, time.Time{}}} {
		top, err := q.TopVisitors(ctx, "visit", "", span.from, span.to, 5)
		if err != nil || len(top) != 2 || top[0].Subject != "b" || top[0].Events != 300 || top[1].Subject != "a" || top[1].Visitors != 4 || top[1].Events != 7 {
			t.Errorf("top visitors, %s = %+v, %v", span.name, top, err)
		}
	}
}

// With a history key the sink stores keyed visitor hashes: the counts are
// the same, and no stored hash is the unkeyed xxhash of a visitor.
func TestSinkKeysVisitors(t *testing.T) {
	pool := historytest.Pool(t)
	ctx := context.Background()
	h, err := history.NewHasher([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := history.NewPrivacy(nil, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: "test-keyed-visitors",
		Visitors: history.Visitors{"visit": "ip"}, Privacy: func() (*history.Privacy, error) { return p, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2030, 5, 6, 7, 8, 0, 0, time.UTC)
	ips := []string{"192.0.2.1", "192.0.2.2", "192.0.2.1", "192.0.2.3"}
	b := consume.Batch{Topic: "t", First: 0, Last: int64(len(ips) - 1)}
	for i, ip := range ips {
		b.Records = append(b.Records, visit(int64(i), "a", ip, t0.Add(time.Duration(i)*time.Second)))
	}
	if err := s.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	k := history.Key{Action: "visit", Kind: "link", Subject: "a"}
	if n, err := history.NewQuerier(pool).TotalVisitors(ctx, k); err != nil || n != 3 {
		t.Fatalf("total visitors %d, %v; want 3", n, err)
	}
	var stored []int64
	if err := pool.QueryRow(ctx, `SELECT (visitors).hashes FROM floodgate.history_totals WHERE action = 'visit' AND subject = 'a'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if len(stored) != 3 {
		t.Fatalf("stored hashes %v, want 3", stored)
	}
	for _, ip := range ips {
		if slices.Contains(stored, history.VisitorHash(ip)) {
			t.Errorf("the unkeyed hash of %s is stored: anyone can test a guess", ip)
		}
	}
}
