package limiter_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"floodgate/event"
	"floodgate/limiter"
	"floodgate/window"
	"floodgate/window/windowtest"
)

// TestMemoryAgreesWithSlidingLog drives random bursty traffic (late events
// included) through the aggregator's write path with headroom tracking, as
// the live sink does, and after every batch, and again as time passes
// without events, asks the limiter from memory about every subject: the
// decision and the retry time must equal an exact sliding log's, and no
// reported remaining quota may exceed what is left.
func TestMemoryAgreesWithSlidingLog(t *testing.T) {
	var clock atomic.Int64
	e := newEnv(t, func(c *limiter.Config, _ *limiter.ServerConfig) {
		c.Now = func() time.Time { return time.UnixMilli(clock.Load()) }
	})
	e.set = mustRules(t, `
rules:
  - name: acc
    action: act
    kinds: [k]
    limits: [3/s, 10/10s, 20/m, 60/5m, 150/h]
`)
	limits := e.set.Rules()[0].Limits
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FLOODGATE_ACCURACY_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (FLOODGATE_ACCURACY_SEED reproduces)", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	zipf := rand.NewZipf(rng, 1.3, 2, 19)
	refs := map[string]*windowtest.Log{}
	base := time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC).UnixMilli()
	clock.Store(base)
	checks, denies := 0, 0

	check := func(batch int) {
		now := clock.Load()
		sec := windowtest.FloorDiv(now, 1000)
		for subj, ref := range refs {
			d, err := e.lim.Check(context.Background(), limiter.Request{Action: "act", Subjects: []limiter.Subject{{Kind: "k", Subject: subj}}})
			if err != nil {
				t.Fatal(err)
			}
			checks++
			var wantUntil int64
			for _, l := range limits {
				w := int64(l.Window / time.Second)
				if c := ref.CountSec(sec, w); c >= l.Count {
					wantUntil = max(wantUntil, ref.Until(sec, w, l.Count-1))
				}
			}
			if d.Allowed != (wantUntil == 0) {
				t.Fatalf("batch %d subject %s at %d: allowed=%v, reference until %d", batch, subj, now, d.Allowed, wantUntil)
			}
			if !d.Allowed {
				denies++
				if d.Denial.Until.Unix() != wantUntil {
					t.Fatalf("batch %d subject %s: retry at %s, reference %s", batch, subj, d.Denial.Until, time.Unix(wantUntil, 0))
				}
			}
			for k, l := range limits {
				got := d.Limits[k]
				c := ref.CountSec(sec, int64(l.Window/time.Second))
				if got.Remaining > max(l.Count-c, 0) {
					t.Fatalf("batch %d subject %s limit %s: remaining %d, but %d of %d are used", batch, subj, l, got.Remaining, c, l.Count)
				}
				if !got.Estimated && got.Count < c {
					t.Fatalf("batch %d subject %s limit %s: count %d under the reference %d", batch, subj, l, got.Count, c)
				}
			}
		}
	}

	for batch := range 250 {
		clock.Add(int64(rng.ExpFloat64() * 700))
		now := clock.Load()
		var evs []event.Event
		for range 1 + rng.IntN(8) {
			subj := "s" + strconv.FormatUint(zipf.Uint64(), 10)
			n := 1 + rng.IntN(2)
			if rng.Float64() < 0.1 {
				n = 4 + rng.IntN(12) // burst
			}
			for range n {
				ts := now - rng.Int64N(1500)
				if rng.Float64() < 0.05 {
					ts = now - rng.Int64N(400_000) // late
				}
				evs = append(evs, event.Event{V: 1, ID: event.NewID(), Action: "act", Kind: "k", Subject: subj, TS: time.UnixMilli(ts).UTC(), N: 1})
				if refs[subj] == nil {
					refs[subj] = &windowtest.Log{}
				}
				refs[subj].Add(ts, 1)
			}
		}
		e.applyBatch(t, evs, time.UnixMilli(now))
		check(batch)
		// Time passes without events: decisions end on their own.
		clock.Add(int64(rng.IntN(3000)))
		check(batch)
	}
	t.Logf("%d subjects, %d checks from memory (%d denied): 0 disagreements with the sliding log", len(refs), checks, denies)
}

// A limiter started after the aggregator counted answers like the one that
// followed from the start, once ready: it loads each partition's snapshot.
func TestLimiterStartedMidStreamAgrees(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	e.apply(t, "login_failed", "ip", "203.0.113.1", 7, now)
	e.apply(t, "login_failed", "email", "mid@example.com", 4, now)
	fresh := limiter.NewState()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	parts := func() int { return testPartitions }
	go func() { _ = limiter.Sync(ctx, limiter.SyncConfig{State: fresh, Source: e.store, Streams: e.rdb, Partitions: parts}) }()
	lim, err := limiter.New(limiter.Config{Store: e.store, State: fresh, Partitions: parts, Rules: func() *rulesSet { return e.set }})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new limiter to load", func() bool { return lim.Ready(ctx) == nil })
	req := limiter.Request{Action: "login_failed", Subjects: []limiter.Subject{{Kind: "ip", Subject: "203.0.113.1"}, {Kind: "email", Subject: "mid@example.com"}}}
	old, err := e.lim.Check(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := lim.Check(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got.Allowed || old.Allowed || got.Denial.Subject != "203.0.113.1" || !got.Denial.Until.Equal(old.Denial.Until) {
		t.Fatalf("fresh limiter %+v, the running one %+v: want the same denial", got.Denial, old.Denial)
	}
	for i := range got.Limits {
		g, o := got.Limits[i], old.Limits[i]
		g.ResetAfter, o.ResetAfter = 0, 0 // measured from each call's own now
		if g != o {
			t.Fatalf("limit %d: fresh %+v, running %+v", i, got.Limits[i], old.Limits[i])
		}
	}
}

// applyBatch counts events of several subjects at now, one batch per
// partition, and waits until the state has them.
func (e *env) applyBatch(tb testing.TB, evs []event.Event, now time.Time) {
	tb.Helper()
	byPart := map[int][]event.Event{}
	for _, ev := range evs {
		p := window.Partition(window.Subject{Action: ev.Action, Kind: ev.Kind, Subject: ev.Subject}, testPartitions)
		byPart[p] = append(byPart[p], ev)
	}
	for p, evs := range byPart {
		e.applyTo(tb, p, evs, now)
	}
}
