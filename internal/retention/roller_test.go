package retention

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
)

// now is the simulated present of these tests.
var now = time.Date(2031, 3, 12, 15, 47, 0, 0, time.UTC)

const testLadder = "1m:1d,5m:3d,1h:7d,1d:forever"

type ev struct {
	action, kind, subject string
	ts                    time.Time
	n                     int64
	ip                    string // the visitor (attr "ip"), counted for visits
}

// spread returns count events over the days before now, deterministic.
func spread(count int, days int, seed uint64) []ev {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]ev, count)
	for i := range out {
		out[i] = ev{
			action:  []string{"visit", "login_failed"}[r.IntN(2)],
			kind:    []string{"ip", "user"}[r.IntN(2)],
			subject: fmt.Sprintf("s%02d", r.IntN(15)),
			ts:      now.Add(-time.Duration(r.Int64N(int64(days) * int64(24*time.Hour)))),
			n:       1 + r.Int64N(3),
			ip:      fmt.Sprintf("10.0.0.%d", r.IntN(40)),
		}
	}
	return out
}

type env struct {
	pool *pgxpool.Pool
	sink *history.Sink
	q    *history.Querier
	next int64
}

func newEnv(t *testing.T, ladder string) *env {
	t.Helper()
	pool := historytest.Pool(t)
	l, err := history.ParseLadder(ladder)
	if err != nil {
		t.Fatal(err)
	}
	s, err := history.NewSink(context.Background(), history.SinkConfig{
		DB: pool, Group: "roller-test", Ladder: l,
		Visitors: history.Visitors{"visit": "ip"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &env{pool: pool, sink: s, q: history.NewQuerier(pool)}
}

func (e *env) apply(t *testing.T, evs []ev) {
	t.Helper()
	const per = 500
	for len(evs) > 0 {
		k := min(per, len(evs))
		b := consume.Batch{Topic: "events", Partition: 0, First: e.next, Last: e.next + int64(k) - 1}
		for i, x := range evs[:k] {
			ev := event.Event{V: 1, ID: event.NewID(), Action: x.action, Kind: x.kind, Subject: x.subject, TS: x.ts, N: x.n}
			if x.ip != "" {
				ev.Attrs = map[string]string{"ip": x.ip}
			}
			b.Records = append(b.Records, consume.Record{Offset: e.next + int64(i), Event: ev})
		}
		if err := e.sink.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		e.next += int64(k)
		evs = evs[k:]
	}
}

func (e *env) roller(t *testing.T, ladder string, at time.Time) *Roller {
	t.Helper()
	l, err := history.ParseLadder(ladder)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Pool: e.pool, Ladder: l, Now: func() time.Time { return at }, ChunkBuckets: 30})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// digest summarises every bucket row of every tier, visitor sketches
// included.
func (e *env) digest(t *testing.T) string {
	t.Helper()
	var d string
	err := e.pool.QueryRow(context.Background(), `SELECT coalesce(md5(string_agg(format('%s|%s|%s|%s|%s|%s|%s', step, action, subject, kind, bucket, n, visitors), ',' ORDER BY step, action, subject, kind, bucket)), 'empty') FROM `+
		pgx.Identifier{"floodgate", "buckets"}.Sanitize()).Scan(&d)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// expectVisitors counts the distinct ips of the visits of subject ("": every
// subject) in [from, to).
func expectVisitors(evs []ev, subject string, from, to time.Time) int64 {
	seen := map[string]bool{}
	for _, x := range evs {
		if x.action == "visit" && x.ip != "" && (subject == "" || x.subject == subject) && !x.ts.Before(from) && x.ts.Before(to) {
			seen[x.ip] = true
		}
	}
	return int64(len(seen))
}

func expectCount(evs []ev, action, subject string, from, to time.Time) int64 {
	var n int64
	for _, x := range evs {
		if x.action == action && (subject == "" || x.subject == subject) && !x.ts.Before(from) && x.ts.Before(to) {
			n += x.n
		}
	}
	return n
}

// checkLadder verifies every tier holds only its own time range, aligned.
func (e *env) checkLadder(t *testing.T, l history.Ladder, at time.Time) {
	t.Helper()
	upper := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, tier := range l {
		lower := time.Time{}
		if i+1 < len(l) {
			lower = history.Bin(at.Add(-tier.Horizon), l[i+1].Width)
		}
		var bad, rows int64
		err := e.pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE bucket < $1 OR bucket >= $2 OR date_bin($3, bucket, timestamptz '2000-01-03 00:00:00+00') <> bucket), count(*) FROM `+
			pgx.Identifier{"floodgate", tier.Table()}.Sanitize(), lower, upper, tier.Width).Scan(&bad, &rows)
		if err != nil {
			t.Fatal(err)
		}
		if bad != 0 {
			t.Errorf("tier %s: %d of %d rows outside [%s, %s) or not aligned", tier.Name, bad, rows, lower.Format(time.RFC3339), upper.Format(time.RFC3339))
		}
		if rows == 0 {
			t.Errorf("tier %s holds no rows; the test data should reach every tier", tier.Name)
		}
		upper = lower
	}
}

func TestRollerLadderAndIdempotence(t *testing.T) {
	e := newEnv(t, testLadder)
	ctx := context.Background()
	evs := spread(6000, 10, 1)
	e.apply(t, evs)
	r := e.roller(t, testLadder, now)
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.RowsMoved() == 0 {
		t.Fatalf("first run moved nothing: %+v", rep)
	}
	l, _ := history.ParseLadder(testLadder)
	e.checkLadder(t, l, now)
	first := e.digest(t)
	rep, err = r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.RowsMoved() != 0 || e.digest(t) != first {
		t.Fatalf("second run changed history: moved %d rows", rep.RowsMoved())
	}

	// Every count over day ranges, every daily curve, every total.
	start := history.Bin(now.Add(-11*24*time.Hour), 24*time.Hour)
	for _, action := range []string{"visit", "login_failed"} {
		for _, subject := range []string{"", "s03", "s07"} {
			k := history.Key{Action: action, Subject: subject}
			curve, err := e.q.Curve(ctx, k, start, now.Add(time.Hour), 24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range curve {
				if want := expectCount(evs, action, subject, p.Time, p.Time.Add(24*time.Hour)); p.Value != want {
					t.Errorf("%v day %s = %d, want %d", k, p.Time.Format(time.DateOnly), p.Value, want)
				}
			}
			// Unique visitors (40 ips: exact) per day, merged by the rolls.
			vc, err := e.q.VisitorsCurve(ctx, k, start, now.Add(time.Hour), 24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range vc {
				want := int64(0)
				if action == "visit" {
					want = expectVisitors(evs, subject, p.Time, p.Time.Add(24*time.Hour))
				}
				if p.Visitors != want {
					t.Errorf("%v day %s: %d visitors, want %d", k, p.Time.Format(time.DateOnly), p.Visitors, want)
				}
			}
			// Hourly over the last 3 days (no tier coarser than 1h there).
			from := history.Bin(now.Add(-3*24*time.Hour), time.Hour)
			got, err := e.q.Count(ctx, k, from, now.Add(time.Minute))
			if want := expectCount(evs, action, subject, from, now.Add(time.Minute)); err != nil || got != want {
				t.Errorf("%v count since %s = %d, %v; want %d", k, from, got, err, want)
			}
			tot, err := e.q.Total(ctx, k)
			if want := expectCount(evs, action, subject, time.Time{}, now.Add(time.Hour)); err != nil || tot != want {
				t.Errorf("%v total = %d, %v; want %d", k, tot, err, want)
			}
		}
	}

	// Late events land in the tier that now covers their time.
	late := []ev{
		{"visit", "ip", "late5m", now.Add(-2 * 24 * time.Hour), 1, ""}, // 5m tier
		{"visit", "ip", "late1h", now.Add(-5 * 24 * time.Hour), 2, ""}, // 1h tier
		{"visit", "ip", "late1d", now.Add(-9 * 24 * time.Hour), 3, ""}, // 1d tier
		{"visit", "ip", "late1m", now.Add(-10 * time.Minute), 4, ""},   // 1m tier
	}
	e.apply(t, late)
	for _, c := range []struct {
		step, subject string
		width         time.Duration
		ts            time.Time
		n             int64
	}{
		{"5m", "late5m", 5 * time.Minute, late[0].ts, 1},
		{"1h", "late1h", time.Hour, late[1].ts, 2},
		{"1d", "late1d", 24 * time.Hour, late[2].ts, 3},
		{"1m", "late1m", time.Minute, late[3].ts, 4},
	} {
		var step string
		var bucket time.Time
		var n int64
		err := e.pool.QueryRow(ctx, `SELECT step, bucket, n FROM `+pgx.Identifier{"floodgate", "buckets"}.Sanitize()+` WHERE subject = $1`, c.subject).Scan(&step, &bucket, &n)
		if err != nil {
			t.Fatalf("late %s: %v", c.subject, err)
		}
		if step != c.step || !bucket.Equal(history.Bin(c.ts, c.width)) || n != c.n {
			t.Errorf("late %s in %s at %s n=%d; want %s at %s n=%d", c.subject, step, bucket, n, c.step, history.Bin(c.ts, c.width), c.n)
		}
	}
}

func TestRollerKilledMidRunFinishesTheSame(t *testing.T) {
	ctx := context.Background()
	evs := spread(3000, 10, 2)

	whole := newEnv(t, testLadder)
	whole.apply(t, evs)
	if _, err := whole.roller(t, testLadder, now).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}

	killed := newEnv(t, testLadder)
	killed.apply(t, evs)
	r := killed.roller(t, testLadder, now)
	kills := 0
	for i := 0; ; i++ {
		kctx, cancel := context.WithCancel(ctx)
		chunks := 0
		r.afterChunk = func() {
			if chunks++; chunks == 150 {
				cancel() // dies inside the next chunk's transaction
			}
		}
		_, err := r.RunOnce(kctx)
		cancel()
		if err == nil {
			break
		}
		if errors.Is(err, ErrBusy) {
			// The killed run's backend is still finishing its statement
			// and holds the lock until it notices: wait like a cron would.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !errors.Is(err, context.Canceled) || i > 1000 {
			t.Fatalf("run %d: %v", i, err)
		}
		kills++
	}
	if kills < 2 {
		t.Fatalf("the roller was killed %d times; the test wants several", kills)
	}
	if a, b := whole.digest(t), killed.digest(t); a != b {
		t.Fatalf("history after interrupted runs differs from one whole run")
	}
}

func TestRollerExpiresAndReportsLateEvents(t *testing.T) {
	const ladder = "1m:1d,5m:3d"
	e := newEnv(t, ladder)
	ctx := context.Background()
	evs := spread(500, 16, 3)
	e.apply(t, evs)
	rep, err := e.roller(t, ladder, now).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := rep.Tiers[len(rep.Tiers)-1]
	if last.From != "5m" || last.Events == 0 {
		t.Fatalf("expiry report %+v: want expired events of 5m", last)
	}
	var inBuckets int64
	if err := e.pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0) FROM `+pgx.Identifier{"floodgate", "buckets"}.Sanitize()).Scan(&inBuckets); err != nil {
		t.Fatal(err)
	}
	all := expectCount(evs, "visit", "", time.Time{}, now.Add(time.Hour)) + expectCount(evs, "login_failed", "", time.Time{}, now.Add(time.Hour))
	if inBuckets+last.Events != all {
		t.Fatalf("buckets %d + expired %d != produced %d", inBuckets, last.Events, all)
	}
	// An event older than the 5m tier's horizon: in totals and history_late.
	e.apply(t, []ev{{"visit", "ip", "ancient", now.Add(-30 * 24 * time.Hour), 7, ""}})
	if tot, err := e.q.Total(ctx, history.Key{Action: "visit", Subject: "ancient"}); err != nil || tot != 7 {
		t.Fatalf("total of the late event = %d, %v; want 7", tot, err)
	}
	if late, err := e.q.Late(ctx, "visit"); err != nil || late != 7 {
		t.Fatalf("late = %d, %v; want 7", late, err)
	}
	if n, err := e.q.Count(ctx, history.Key{Action: "visit", Subject: "ancient"}, time.Time{}, now); err != nil || n != 0 {
		t.Fatalf("late event in a bucket: count %d, %v", n, err)
	}
}

func TestRollerLock(t *testing.T) {
	e := newEnv(t, testLadder)
	ctx := context.Background()
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('floodgate.history'), hashtext('floodgate.roller'))`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.roller(t, testLadder, now).RunOnce(ctx); !errors.Is(err, ErrBusy) {
		t.Fatalf("RunOnce while locked = %v, want ErrBusy", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtext('floodgate.history'), hashtext('floodgate.roller'))`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.roller(t, testLadder, now).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
}

// A finished run followed by one an hour later walks only the new hour, and
// rows left below a watermark are still moved.
func TestRollerStartsAtTheWatermark(t *testing.T) {
	e := newEnv(t, testLadder)
	ctx := context.Background()
	e.apply(t, spread(2000, 10, 7))
	if _, err := e.roller(t, testLadder, now).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := e.roller(t, testLadder, now.Add(time.Hour)).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range rep.Tiers {
		// 1m→5m chunks are 30 minutes, 5m→1h 3 hours, 1h→1d a day.
		if tr.To != "" && tr.Chunks > 3 {
			t.Errorf("%s→%s: %d chunks an hour after a finished run, want at most 3 (from the watermark)", tr.From, tr.To, tr.Chunks)
		}
	}
	// A row below the 1m watermark (as after a ladder change) is moved.
	stray := now.Add(-5 * 24 * time.Hour).Truncate(time.Minute)
	if _, err := e.pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{"floodgate", "bucket_1m"}.Sanitize()+` VALUES ('visit', 'stray', 'ip', $1, 3)`, stray); err != nil {
		t.Fatal(err)
	}
	if _, err := e.roller(t, testLadder, now.Add(time.Hour)).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	var left int64
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{"floodgate", "bucket_1m"}.Sanitize()+` WHERE subject = 'stray'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if n, err := e.q.Count(ctx, history.Key{Action: "visit", Subject: "stray"}, stray.Add(-time.Hour), stray.Add(time.Hour)); left != 0 || err != nil || n != 3 {
		t.Fatalf("stray row below the watermark: %d left in 1m, count %d, %v; want moved, 3", left, n, err)
	}
}

// A long reader of the bucket tables does not block a run with nothing to
// drop, and makes a run with something to drop skip the drop, not wait.
func TestRollerDoesNotWaitForReaders(t *testing.T) {
	e := newEnv(t, testLadder)
	ctx := context.Background()
	e.apply(t, spread(500, 10, 11))
	if _, err := e.roller(t, testLadder, now).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	read := func() pgx.Tx {
		t.Helper()
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []string{"1m", "5m", "1h", "1d"} {
			if _, err := tx.Exec(ctx, `SELECT count(*) FROM `+pgx.Identifier{"floodgate", "bucket_" + step}.Sanitize()); err != nil {
				t.Fatal(err)
			}
		}
		return tx
	}
	run := func(lockTimeout time.Duration) (Report, time.Duration) {
		t.Helper()
		r := e.roller(t, testLadder, now)
		r.cfg.LockTimeout = lockTimeout
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		start := time.Now()
		rep, err := r.RunOnce(rctx)
		if err != nil {
			t.Fatalf("run while a reader holds the bucket tables: %v", err)
		}
		return rep, time.Since(start)
	}

	// Nothing to drop: no table lock is even asked for.
	tx := read()
	if _, took := run(10 * time.Second); took > 5*time.Second {
		t.Fatalf("a run with nothing to drop took %s behind a reader", took)
	}
	_ = tx.Rollback(ctx)

	// An empty 1m partition below the watermark: the drop waits for a run
	// without reader.
	if _, err := e.pool.Exec(ctx, `SELECT `+pgx.Identifier{"floodgate", "ensure_partition"}.Sanitize()+`('1m', $1)`, now.Add(-9*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	tx = read()
	rep, took := run(200 * time.Millisecond)
	_ = tx.Rollback(ctx)
	if rep.Tiers[0].Dropped != 0 || took > 5*time.Second {
		t.Fatalf("run behind a reader: dropped %d in %s, want 0 and no wait", rep.Tiers[0].Dropped, took)
	}
	if rep, _ := run(10 * time.Second); rep.Tiers[0].Dropped != 1 {
		t.Fatalf("run without reader dropped %d 1m partitions, want 1", rep.Tiers[0].Dropped)
	}
}
