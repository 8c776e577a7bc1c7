package live_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

const loginRules = `
rules:
  - name: login
    action: login_failed
    kinds: [ip, email]
    limits: [2/s, 5/m, 10/h, 100/d]
    message: slow down
    allow: [10.0.0.0/8, ops@example.com]
  - name: login-shadow
    action: login_failed
    kinds: [user]
    limits: [2/s, 5/m]
    shadow: true
`

type step struct {
	at   time.Duration // event time and clock, from base
	n    int           // events (one batch)
	want string        // new decision's limit ("" = none)
	// until of the new decision, from base
	until time.Duration
	count int64
}

// TestSeveralLimitsDenyAtTheRightMoment drives one subject through each of
// its four windows with an injected clock: every limit denies exactly at
// its (limit+1)th event, and the deny record expires when the window falls
// back under the limit.
func TestSeveralLimitsDenyAtTheRightMoment(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, loginRules)
	ctx := context.Background()
	b := &batcher{Topic: "events", Partition: 0}
	sub := window.Subject{Action: "login_failed", Kind: "ip", Subject: "203.0.113.7"}

	steps := []step{
		{at: 0, n: 1},
		{at: 500 * time.Millisecond, n: 1},
		{at: 900 * time.Millisecond, n: 1, want: "2/1s", count: 3, until: time.Second}, // 3rd in a second
		{at: 1500 * time.Millisecond, n: 1},                                            // second 1 holds one event
		{at: 2 * time.Second, n: 1},                                                    // 5 in the minute: allowed
		{at: 3 * time.Second, n: 1, want: "5/1m", count: 6, until: time.Minute},        // 6th: second 0 leaves at +60s
		{at: 61 * time.Second, n: 1},
		{at: 120 * time.Second, n: 1},
		{at: 121 * time.Second, n: 1},
		{at: 150 * time.Second, n: 1}, // 10 in the hour
		{at: 180 * time.Second, n: 1, want: "10/1h", count: 11, until: time.Hour},
	}
	// Fill the day without tripping the shorter windows: 9 events an hour,
	// one every 5 minutes, in hours 2..11. The 101st event of the day is the
	// 90th of these, in hour 11 at minute 40.
	for h := 2; h <= 11; h++ {
		for j := 0; j < 9; j++ {
			s := step{at: time.Duration(h)*time.Hour + time.Duration(j)*5*time.Minute, n: 1}
			if h == 11 && j == 8 {
				s.want, s.count, s.until = "100/1d", 101, 24*time.Hour
			}
			steps = append(steps, s)
		}
	}
	for i, s := range steps {
		now := base.Add(s.at)
		var evs = make([]eventT, 0, s.n)
		for k := 0; k < s.n; k++ {
			evs = append(evs, ev(sub.Action, sub.Kind, sub.Subject, now))
		}
		res, err := applierOf(t, st).Apply(ctx, "g", b.Batch(evs...), set, now, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got *window.DecisionMessage
		for k := range res.Decisions {
			if !res.Decisions[k].Shadow {
				got = &res.Decisions[k]
			}
		}
		if s.want == "" {
			if got != nil {
				t.Fatalf("step %d (+%s): unexpected decision %+v", i, s.at, *got)
			}
			continue
		}
		if got == nil {
			t.Fatalf("step %d (+%s): no decision, want %s", i, s.at, s.want)
		}
		if got.Limit.String() != s.want || got.Count != s.count || !got.Until.Equal(base.Add(s.until)) || got.Rule != "login" {
			t.Fatalf("step %d (+%s): decision %s count %d until +%s, want %s count %d until +%s",
				i, s.at, got.Limit, got.Count, got.Until.Sub(base), s.want, s.count, s.until)
		}
		// The deny record says the same and expires at until (by the
		// store's clock: its TTL is until - now).
		d := readDeny(t, rdb, st, sub)
		if d == nil || d.Until != got.Until || d.Limit != got.Limit || d.Count != got.Count || d.Message != "slow down" {
			t.Fatalf("step %d: deny record %+v, decision %+v", i, d, got)
		}
		pttl := rdb.PTTL(ctx, st.Keys().Deny(0, sub)).Val()
		if want := got.Until.Sub(now); pttl > want || pttl < want-2*time.Second {
			t.Fatalf("step %d: deny PTTL %s, want about %s", i, pttl, want)
		}
	}

	// The window sums at the end, one round trip for all four.
	end := base.Add(11*time.Hour + 40*time.Minute)
	states, err := st.Check(ctx, end, []window.Query{{Subject: sub, Windows: []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := states[0].Sums, []int64{1, 1, 9, 101}; !equal(got, want) {
		t.Fatalf("sums at end = %v, want %v", got, want)
	}
	if states[0].Deny == nil || states[0].Deny.Limit.String() != "100/1d" {
		t.Fatalf("Check deny = %+v", states[0].Deny)
	}
}

func readDeny(tb testing.TB, rdb *redis.Client, st *window.Store, sub window.Subject) *window.Deny {
	tb.Helper()
	v, err := rdb.Get(context.Background(), st.Keys().Deny(0, sub)).Bytes()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	d, err := window.ParseDeny(v)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestShadowNeverDenies: a shadow rule over its limit yields shadow
// decisions (once per episode) but never a deny record.
func TestShadowNeverDenies(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, loginRules)
	ctx := context.Background()
	b := &batcher{Topic: "events"}
	sub := window.Subject{Action: "login_failed", Kind: "user", Subject: "alice"}
	var shadow int
	for i := 0; i < 20; i++ {
		now := base.Add(time.Duration(i) * 100 * time.Millisecond)
		res, err := applierOf(t, st).Apply(ctx, "g", b.Batch(ev(sub.Action, sub.Kind, sub.Subject, now)), set, now, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range res.Decisions {
			if !d.Shadow || d.Rule != "login-shadow" {
				t.Fatalf("decision %+v, want shadow decisions only", d)
			}
			shadow++
		}
		if d := readDeny(t, rdb, st, sub); d != nil {
			t.Fatalf("event %d: shadow rule wrote a deny record %+v", i, d)
		}
	}
	// 3rd event: 2/s exceeded (new); 6th: 5/m exceeded (a longer episode, new).
	if shadow != 2 {
		t.Fatalf("shadow decisions = %d, want 2 (2/s, then 5/m)", shadow)
	}
	if n := rdb.Exists(ctx, st.Keys().Shadow(0, sub)).Val(); n != 1 {
		t.Fatalf("shadow record missing")
	}
}

// TestAllowlistedNeverDenied: allowlisted subjects (exact and CIDR) are
// counted but never denied; their neighbours are.
func TestAllowlistedNeverDenied(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, loginRules)
	ctx := context.Background()
	b := &batcher{Topic: "events"}
	subs := map[window.Subject]bool{ // subject -> allowlisted
		{Action: "login_failed", Kind: "ip", Subject: "10.2.3.4"}:           true,
		{Action: "login_failed", Kind: "email", Subject: "ops@example.com"}: true,
		{Action: "login_failed", Kind: "ip", Subject: "11.2.3.4"}:           false,
		{Action: "login_failed", Kind: "email", Subject: "eve@example.com"}: false,
	}
	denied := map[window.Subject]int{}
	for i := 0; i < 50; i++ {
		now := base.Add(time.Duration(i) * 300 * time.Millisecond)
		var evs []eventT
		for s := range subs {
			evs = append(evs, ev(s.Action, s.Kind, s.Subject, now), ev(s.Action, s.Kind, s.Subject, now))
		}
		res, err := applierOf(t, st).Apply(ctx, "g", b.Batch(evs...), set, now, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range res.Decisions {
			denied[window.Subject{Action: d.Action, Kind: d.Kind, Subject: d.Subject}]++
		}
	}
	for s, allowed := range subs {
		if allowed && (denied[s] > 0 || readDeny(t, rdb, st, s) != nil) {
			t.Errorf("allowlisted %v denied", s)
		}
		if !allowed && denied[s] == 0 {
			t.Errorf("%v never denied", s)
		}
		states, err := st.Check(ctx, base.Add(49*300*time.Millisecond), []window.Query{{Subject: s, Windows: []time.Duration{time.Hour}}})
		if err != nil {
			t.Fatal(err)
		}
		if states[0].Sums[0] != 100 {
			t.Errorf("%v counted %d, want 100", s, states[0].Sums[0])
		}
	}
}

// TestExactlyOnceOffsets: a batch applied twice counts once; a batch that
// overlaps the stored offset applies only its tail; Resume reads the offset.
func TestExactlyOnceOffsets(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, loginRules)
	ctx := context.Background()
	sub := window.Subject{Action: "login_failed", Kind: "email", Subject: "a@example.com"}
	if _, ok, err := st.Resume(ctx, "g", "events", 0); err != nil || ok {
		t.Fatalf("Resume before any batch = %v, %v", ok, err)
	}
	b := &batcher{Topic: "events", Partition: 0, Next: 100}
	evs := func(n int) []eventT {
		out := make([]eventT, n)
		for i := range out {
			out[i] = ev(sub.Action, sub.Kind, sub.Subject, base)
		}
		return out
	}
	b1 := b.Batch(evs(3)...) // 100..102
	b2 := b.Batch(evs(4)...) // 103..106
	for i, bt := range []struct {
		b         batchT
		dup       bool
		trimmed   int
		wantCount int64
	}{{b1, false, 0, 3}, {b1, true, 0, 3}, {b2, false, 0, 7}, {b2, true, 0, 7}} {
		res, err := applierOf(t, st).Apply(ctx, "g", bt.b, set, base, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Duplicate != bt.dup {
			t.Fatalf("apply %d: duplicate = %v, want %v", i, res.Duplicate, bt.dup)
		}
		assertSum(t, st, sub, base, 24*time.Hour, bt.wantCount)
	}
	// A stale owner's batch 101..108 overlapping the stored offset 107:
	// only 107 and 108 count.
	stale := b1
	stale.First, stale.Last, stale.Records = 101, 108, nil
	for off := int64(101); off <= 108; off++ {
		stale.Records = append(stale.Records, recordAt(off, ev(sub.Action, sub.Kind, sub.Subject, base)))
	}
	res, err := applierOf(t, st).Apply(ctx, "g", stale, set, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Trimmed != 6 || res.Applied != 2 {
		t.Fatalf("stale batch: trimmed %d applied %d, want 6 and 2", res.Trimmed, res.Applied)
	}
	assertSum(t, st, sub, base, 24*time.Hour, 9)
	next, ok, err := st.Resume(ctx, "g", "events", 0)
	if err != nil || !ok || next != 109 {
		t.Fatalf("Resume = %d, %v, %v; want 109", next, ok, err)
	}
	// Another group keeps its own offsets.
	if _, ok, _ := st.Resume(ctx, "other", "events", 0); ok {
		t.Fatal("offsets leak between groups")
	}
	// A batch 120..121 after the stored offset 109: the slot lost writes
	// it had acknowledged (a failover). Applying it would skip 109..119
	// for good: it is refused, nothing is written, and the caller is told
	// where to read again from.
	ahead := b1
	ahead.First, ahead.Last, ahead.Records = 120, 121, []consume.Record{
		recordAt(120, ev(sub.Action, sub.Kind, sub.Subject, base)), recordAt(121, ev(sub.Action, sub.Kind, sub.Subject, base))}
	_, err = applierOf(t, st).Apply(ctx, "g", ahead, set, base, nil)
	var rewind *consume.RewindError
	if !errors.As(err, &rewind) || rewind.Next != 109 || rewind.First != 120 || rewind.Partition != 0 {
		t.Fatalf("batch after the stored offset: %v, want a RewindError to 109", err)
	}
	assertSum(t, st, sub, base, 24*time.Hour, 9)
	if next, _, _ := st.Resume(ctx, "g", "events", 0); next != 109 {
		t.Fatalf("offset after a refused batch: %d, want 109", next)
	}
}

func assertSum(tb testing.TB, st *window.Store, sub window.Subject, now time.Time, w time.Duration, want int64) {
	tb.Helper()
	states, err := st.Check(context.Background(), now, []window.Query{{Subject: sub, Windows: []time.Duration{w}}})
	if err != nil {
		tb.Fatal(err)
	}
	if got := states[0].Sums[0]; got != want {
		tb.Fatalf("sum %s of %v = %d, want %d", w, sub, got, want)
	}
}

// TestOldCountedAndUnruledEventsSkipCounters covers the three skips.
func TestOldCountedAndUnruledEventsSkipCounters(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, loginRules)
	ctx := context.Background()
	b := &batcher{Topic: "events"}
	sub := window.Subject{Action: "login_failed", Kind: "ip", Subject: "198.51.100.1"}
	now := base.Add(48 * time.Hour)
	bt := b.Batch(
		ev(sub.Action, sub.Kind, sub.Subject, now.Add(-24*time.Hour)),             // old: outside 1d
		ev(sub.Action, sub.Kind, sub.Subject, now.Add(-24*time.Hour+time.Second)), // the day's first second
		ev(sub.Action, sub.Kind, sub.Subject, now),
		ev("visit", "link", "abc", now), // no rule
	)
	bt.Records[2].Counted = true
	res, err := applierOf(t, st).Apply(ctx, "g", bt, set, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Old != 1 || res.Applied != 1 || res.CountedByLimiter != 1 || res.NoRule != 1 || res.Subjects != 1 {
		t.Fatalf("result %+v", res)
	}
	assertSum(t, st, sub, now, 24*time.Hour, 1)
	// The minute hash and the hour hash of the counted event exist with a
	// TTL from the longest window (1d) plus slack; its second hash too.
	ts := now.Add(-24*time.Hour + time.Second)
	for _, level := range []byte{'s', 'm', 'h'} {
		ttl := rdb.TTL(ctx, st.Keys().Bucket(0, sub, level, ts)).Val()
		if ttl <= 0 || ttl > 24*time.Hour+2*time.Hour {
			t.Errorf("level %c TTL = %s", level, ttl)
		}
	}
	_ = rules.MaxWindow
}

// TestApplySplitsLargeBatches: a batch with more distinct subjects than
// MaxSubjects is applied as several consecutive-offset runs, still exactly
// once, including the offsets after its last record (dead letters).
func TestApplySplitsLargeBatches(t *testing.T) {
	rdb := stacktest.Redis(t)
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: onePartition})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := live.NewApplier(st, live.ApplierConfig{MaxSubjects: 7})
	if err != nil {
		t.Fatal(err)
	}
	set := mustRules(t, loginRules)
	ctx := context.Background()
	b := &batcher{Topic: "events", Partition: 0}
	var evs []eventT
	for i := 0; i < 60; i++ {
		evs = append(evs, ev("login_failed", "email", "u"+strconv.Itoa(i%20)+"@example.com", base))
	}
	bt := b.Batch(evs...)
	bt.Last += 3 // three dead-lettered messages at the end
	for round := 0; round < 2; round++ {
		res, err := ap.Apply(ctx, "g", bt, set, base, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Duplicate != (round == 1) {
			t.Fatalf("round %d: duplicate = %v", round, res.Duplicate)
		}
		for i := 0; i < 20; i++ {
			sub := window.Subject{Action: "login_failed", Kind: "email", Subject: "u" + strconv.Itoa(i) + "@example.com"}
			assertSum(t, st, sub, base, time.Hour, 3)
		}
	}
	if next, ok, err := st.Resume(ctx, "g", "events", 0); err != nil || !ok || next != bt.Last+1 {
		t.Fatalf("Resume = %d, %v, %v; want %d", next, ok, err, bt.Last+1)
	}
}

// One event slightly ahead of the clock (accepted skew) must not hide the
// batch's short-window deny: the subject is evaluated at now as well as at
// its latest event.
func TestFutureEventDoesNotMaskShortWindowDeny(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, `
rules:
  - name: burst
    action: login_failed
    kinds: [ip]
    limits: [2/1s]
`)
	now := base.Add(100 * time.Millisecond) // the deny record lives 900ms
	for _, skew := range []time.Duration{0, time.Second, 3 * time.Second} {
		b := &batcher{Topic: "t" + skew.String()}
		sub := window.Subject{Action: "login_failed", Kind: "ip", Subject: "192.0.2." + strconv.Itoa(int(skew/time.Second)+1)}
		var evs []eventT
		for range 10 {
			evs = append(evs, ev(sub.Action, sub.Kind, sub.Subject, now))
		}
		evs = append(evs, ev(sub.Action, sub.Kind, sub.Subject, now.Add(skew)))
		res, err := applierOf(t, st).Apply(context.Background(), "g", b.Batch(evs...), set, now, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Decisions) != 1 {
			t.Fatalf("skew %s: %d decisions, want 1", skew, len(res.Decisions))
		}
		d := res.Decisions[0]
		wantCount, wantUntil := int64(10), base.Add(time.Second)
		if skew == 0 {
			wantCount = 11
		}
		if d.Count != wantCount || !d.Until.Equal(wantUntil) || !d.TS.Equal(base) {
			t.Errorf("skew %s: decision count %d until %s ts %s; want %d, %s, %s", skew, d.Count, d.Until, d.TS, wantCount, wantUntil, base)
		}
		if rec := readDeny(t, rdb, st, sub); rec == nil || !rec.Until.Equal(wantUntil) {
			t.Errorf("skew %s: deny record %+v, want until %s", skew, rec, wantUntil)
		}
	}
}

// flakyRedis fails the failAt-th script call (EvalSha) once.
type flakyRedis struct {
	*redis.Client
	calls, failAt atomic.Int32
}

func (f *flakyRedis) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if f.calls.Add(1) == f.failAt.Load() {
		c := redis.NewCmd(ctx)
		c.SetErr(errors.New("injected failure"))
		return c
	}
	return f.Client.EvalSha(ctx, sha, keys, args...)
}

// A batch applied in several script runs whose second run fails: the runs
// that succeeded wrote their decisions into the change stream with their
// counts, and the retry writes the rest. Every decision is in the stream
// exactly once: nothing is lost between counting and publishing.
func TestPartlyAppliedBatchKeepsEveryDecisionOnce(t *testing.T) {
	rdb := stacktest.Redis(t)
	f := &flakyRedis{Client: rdb}
	f.failAt.Store(2)
	st, err := window.NewStore(f, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: onePartition})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := live.NewApplier(st, live.ApplierConfig{MaxSubjects: 2})
	if err != nil {
		t.Fatal(err)
	}
	set := mustRules(t, `
rules:
  - name: r
    action: a
    kinds: [ip]
    limits: [1/1m]
`)
	var evs []eventT
	for i := range 4 {
		ip := "192.0.2." + strconv.Itoa(i)
		evs = append(evs, ev("a", "ip", ip, base), ev("a", "ip", ip, base))
	}
	b := (&batcher{Topic: "t"}).Batch(evs...)
	res, err := ap.Apply(context.Background(), "g", b, set, base, nil)
	if err == nil {
		t.Fatal("first attempt: no error, want the injected failure")
	}
	if got := len(res.Decisions); got != 2 {
		t.Fatalf("first attempt reported %d decisions, want the first run's 2", got)
	}
	if _, err := ap.Apply(context.Background(), "g", b, set, base, nil); err != nil {
		t.Fatal(err)
	}
	msgs, err := rdb.XRange(context.Background(), st.Keys().Log(0), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		c, err := window.ParseChange(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range c.Decisions {
			got = append(got, d.Kind+":"+d.Subject)
		}
	}
	sort.Strings(got)
	want := []string{"ip:192.0.2.0", "ip:192.0.2.1", "ip:192.0.2.2", "ip:192.0.2.3"}
	if !slices.Equal(got, want) {
		t.Fatalf("decisions in the change stream %v, want %v", got, want)
	}
}

// Every script compiles and loads, on a single Redis and on every primary
// of the cluster profile.
func TestLoadScripts(t *testing.T) {
	rdb := stacktest.Redis(t)
	if err := newStore(t, rdb).LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	crdb := stacktest.ClusterRedis(t)
	st, err := window.NewStore(crdb, window.StoreConfig{Prefix: stacktest.ClusterPrefix(t, crdb), Partitions: onePartition})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Takes of several slots share a pipeline; a Redis that lost its scripts
// (a restart, a failover) refuses every run with NOSCRIPT, and those runs
// are sent again once the script is loaded: each counts exactly once, and
// a run with a bad request fails alone. On a single Redis and on the
// cluster profile, where the pipeline's runs go to different primaries.
func TestTakeSlotsCountOnceAcrossAScriptFlush(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		rdb := stacktest.Redis(t)
		takeSlotsAcrossAFlush(t, rdb, stacktest.Prefix(t, rdb), func(ctx context.Context) error { return rdb.ScriptFlush(ctx).Err() })
	})
	t.Run("cluster", func(t *testing.T) {
		rdb := stacktest.ClusterRedis(t)
		takeSlotsAcrossAFlush(t, rdb, stacktest.ClusterPrefix(t, rdb), func(ctx context.Context) error {
			return rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() })
		})
	})
}

func takeSlotsAcrossAFlush(t *testing.T, rdb window.Redis, prefix string, flush func(context.Context) error) {
	ctx := context.Background()
	const parts = 4
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: prefix, Partitions: func() int { return parts }})
	if err != nil {
		t.Fatal(err)
	}
	var subs []window.Subject // one subject in each of two slots
	for i := 0; len(subs) < 2; i++ {
		s := window.Subject{Action: "login", Kind: "ip", Subject: fmt.Sprintf("10.0.0.%d", i)}
		if len(subs) == 0 || window.Partition(s, parts) != window.Partition(subs[0], parts) {
			subs = append(subs, s)
		}
	}
	query := func(s window.Subject) []window.EvalQuery {
		return []window.EvalQuery{{Subject: s, MaxWindow: time.Minute, Count: true,
			Limits: []window.EvalLimit{{Limit: rules.Limit{Count: 3, Window: time.Minute}, Block: true}}}}
	}
	now := time.Now()
	take := window.TakeRequest{Queries: query(subs[0]), N: 1}
	runs := []window.SlotTakes{
		{Partition: window.Partition(subs[0], parts), Now: now, Reqs: []window.TakeRequest{take, take}},
		{Partition: window.Partition(subs[1], parts), Now: now, Reqs: []window.TakeRequest{{Queries: query(subs[1]), N: 1}}},
		{Partition: window.Partition(subs[1], parts), Now: now, Reqs: []window.TakeRequest{{Queries: query(subs[1]), N: 0}}},
	}
	if err := flush(ctx); err != nil {
		t.Fatal(err)
	}
	res, errs := st.TakeSlots(ctx, runs)
	if errs[0] != nil || errs[1] != nil || errs[2] == nil {
		t.Fatalf("errors %v; want the third run's alone", errs)
	}
	if !res[0][0].Taken || !res[0][1].Taken || res[0][1].States[0].Sums[0] != 1 || !res[1][0].Taken {
		t.Fatalf("results %+v", res[:2])
	}
	for i, want := range []int64{2, 1} {
		es, err := st.Evaluate(ctx, now, query(subs[i]), 1)
		if err != nil {
			t.Fatal(err)
		}
		if es[0].Sums[0] != want {
			t.Errorf("%s counted %d, want %d", window.Field(subs[i]), es[0].Sums[0], want)
		}
	}
}

// A window of exactly a minute or an hour is read from the finer levels,
// so a subject whose longest window is one writes no coarser level; at the
// one second where the window is aligned on a whole minute (hour) its sum
// and its deny are still exact, in the script and from the copies alike.
func TestAlignedMinuteAndHourWindowsReadFinerLevels(t *testing.T) {
	rdb := stacktest.Redis(t)
	set := mustRules(t, `
rules:
  - name: per-minute
    action: m
    kinds: [ip]
    limits: [2/m]
  - name: per-hour
    action: h
    kinds: [ip]
    limits: [2/h]
`)
	ctx := context.Background()
	for _, tc := range []struct {
		action string
		w      time.Duration
		level  byte // the level a subject of the rule must not write
	}{
		{"m", time.Minute, 'm'},
		{"h", time.Hour, 'h'},
	} {
		for _, copies := range []bool{false, true} {
			st := newStore(t, rdb)
			var hr *live.Headroom
			if copies {
				hr = live.NewHeadroom(100)
			}
			b := &batcher{Topic: "t"}
			sub := window.Subject{Action: tc.action, Kind: "ip", Subject: "192.0.2.1"}
			last := base.Add(tc.w - time.Second) // the window [base, last] is aligned
			var denied int
			for _, at := range []time.Time{base, base.Add(tc.w / 2), last} {
				res, err := applierOf(t, st).Apply(ctx, "g", b.Batch(ev(sub.Action, sub.Kind, sub.Subject, at)), set, at, hr)
				if err != nil {
					t.Fatal(err)
				}
				denied += len(res.Decisions)
			}
			if denied != 1 {
				t.Errorf("%s window, copies %v: %d decisions, want the third event denied", tc.w, copies, denied)
			}
			assertSum(t, st, sub, last, tc.w, 3)
			assertSum(t, st, sub, last.Add(time.Second), tc.w, 2)
			if n, err := rdb.Exists(ctx, st.Keys().Bucket(0, sub, tc.level, base)).Result(); err != nil || n != 0 {
				t.Errorf("%s window: the %c level was written (%d, %v)", tc.w, tc.level, n, err)
			}
		}
	}
}
