package decide_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/internal/window/windowtest"
)

// TestMemoryAgreesWithSlidingLog drives random bursty traffic (late events
// included) through the aggregator's write path with headroom tracking, as
// the live sink does, and after every batch, and again as time passes
// without events, asks the limiter from memory about every subject: the
// decision and the retry time must equal an exact sliding log's, and no
// reported remaining quota may exceed what is left.
func TestMemoryAgreesWithSlidingLog(t *testing.T) {
	var clock atomic.Int64
	e := newEnv(t, func(c *decide.Config, _ *decide.ServerConfig) {
		c.Now = func() time.Time { return time.UnixMilli(clock.Load()) }
	})
	e.set = mustRules(t, `
rules:
  - name: acc
    action: act
    kinds: [k]
    limits: [3/s, 10/10s, 20/m, 60/5m, 150/h]
    overrides:
      - plan: gold
        scale: 3
      - plan: small
        scale: 0.5
      - subjects: [s3, s7]
        limits: [1/s, 40/m]
plans:
  k: {s2: gold, s4: small, s7: gold, s9: small}
`)
	// Every subject is judged by its own limits: the rule's, or those an
	// override gives it (s2 and s4 by their plan, s3 and s7 by name).
	limitsOf := func(subj string) []rules.Limit {
		l, _ := e.set.Limits(e.set.Rules()[0], "k", subj)
		return l
	}
	seed := windowtest.Seed(t)
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
			d, err := e.lim.Check(context.Background(), decide.Request{Action: "act", Subjects: []decide.Subject{{Kind: "k", Subject: subj}}})
			if err != nil {
				t.Fatal(err)
			}
			checks++
			limits := limitsOf(subj)
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
	fresh := decide.NewState()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	parts := func() int { return testPartitions }
	go func() {
		_ = decide.Sync(ctx, decide.SyncConfig{State: fresh, Source: e.store, Streams: e.rdb, Partitions: parts})
	}()
	lim, err := decide.New(decide.Config{Store: e.store, State: fresh, Partitions: parts, Rules: func() *rulesSet { return e.set }})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new limiter to load", func() bool { return lim.Ready(ctx) == nil })
	req := decide.Request{Action: "login_failed", Subjects: []decide.Subject{{Kind: "ip", Subject: "203.0.113.1"}, {Kind: "email", Subject: "mid@example.com"}}}
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

// gcra is the reference token bucket: the theoretical arrival time, in
// microseconds, advanced by every event in arrival order.
type gcra struct{ tat int64 }

func (g *gcra) add(us, n, interval int64) { g.tat = max(g.tat, us) + n*interval }

// TestBucketAgreesWithGCRA drives bursty traffic through the aggregator's
// write path and asks the limiter from memory after every batch and as time
// passes: allowed exactly when the reference GCRA says the next event
// conforms, with the same retry time to the microsecond.
func TestBucketAgreesWithGCRA(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			var clock atomic.Int64
			e := newEnv(t, func(c *decide.Config, _ *decide.ServerConfig) {
				c.Now = func() time.Time { return time.UnixMicro(clock.Load()) }
			})
			e.set = mustRules(t, `
rules:
  - name: api
    action: api
    kinds: [user]
    bucket: {rate: 3/s, burst: 4}
  - name: one
    action: api
    kinds: [user]
    bucket: {rate: 1/2s, burst: 1}
    shadow: true
`)
			api := e.set.Rule("api").Bucket
			maxw := int64(e.set.MaxWindowFor("api", "user") / time.Second)
			rng := rand.New(rand.NewPCG(seed, 3))
			refs := map[string]*gcra{}
			clock.Store(time.Date(2031, 5, 6, 8, 0, 0, 0, time.UTC).UnixMicro())
			checks, denies := 0, 0
			check := func(batch int) {
				now := clock.Load()
				for subj, g := range refs {
					d, err := e.lim.Check(context.Background(), decide.Request{Action: "api", Subjects: []decide.Subject{{Kind: "user", Subject: subj}}})
					if err != nil {
						t.Fatal(err)
					}
					checks++
					until := g.tat + api.Interval().Microseconds() - api.Interval().Microseconds()*api.Burst
					if d.Allowed != (until <= now) {
						t.Fatalf("batch %d user %s at %d: allowed=%v, reference next conforms at %d (tat %d)", batch, subj, now, d.Allowed, until, g.tat)
					}
					if !d.Allowed {
						denies++
						if got := d.Denial.Until.UnixMicro(); got != until || d.Denial.Rate != "3/1s" {
							t.Fatalf("batch %d user %s: retry at %d rate %q, reference %d", batch, subj, got, d.Denial.Rate, until)
						}
					}
				}
			}
			for batch := range 150 {
				clock.Add(int64(rng.ExpFloat64() * 400_000))
				now := clock.Load()
				var evs []event.Event
				for range 1 + rng.IntN(6) {
					subj := "u" + strconv.Itoa(rng.IntN(6))
					n := 1 + rng.IntN(2)
					if rng.Float64() < 0.15 {
						n = 3 + rng.IntN(6) // burst
					}
					for range n {
						us := now - rng.Int64N(900_000)
						if rng.Float64() < 0.05 {
							us = now - rng.Int64N(20_000_000) // late
						}
						evs = append(evs, event.Event{V: 1, ID: event.NewID(), Action: "api", Kind: "user", Subject: subj, TS: time.UnixMicro(us).UTC(), N: 1})
						if refs[subj] == nil {
							refs[subj] = &gcra{}
						}
						// The store keeps milliseconds of event time, and skips
						// events older than the rules look back.
						if windowtest.FloorDiv(us, 1_000_000) > windowtest.FloorDiv(now, 1_000_000)-maxw {
							refs[subj].add(us/1000*1000, 1, api.Interval().Microseconds())
						}
					}
				}
				e.applyBatch(t, evs, time.UnixMicro(now))
				check(batch)
				clock.Add(int64(rng.IntN(1_500_000)))
				check(batch)
			}
			t.Logf("%d checks from memory (%d denied): 0 disagreements with the reference GCRA", checks, denies)
		})
	}
}

// TestDistinctAgreesWithExactSets counts distinct e-mails per IP (events'
// attrs) and asks the limiter from memory: denied exactly when the
// reference set of e-mails seen in the window holds the limit, with the
// same retry second.
func TestDistinctAgreesWithExactSets(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			var clock atomic.Int64
			e := newEnv(t, func(c *decide.Config, _ *decide.ServerConfig) {
				c.Now = func() time.Time { return time.UnixMilli(clock.Load()) }
			})
			e.set = mustRules(t, `
rules:
  - name: stuffing
    action: login_failed
    kinds: [ip]
    distinct: email
    limits: [4/10s, 9/1m]
`)
			limits := e.set.Rule("stuffing").Limits
			rng := rand.New(rand.NewPCG(seed, 4))
			// per IP: e-mail -> the last second it was seen
			refs := map[string]map[string]int64{}
			clock.Store(time.Date(2031, 5, 6, 9, 0, 0, 0, time.UTC).UnixMilli())
			checks, denies := 0, 0
			count := func(seen map[string]int64, sec, w int64) (int64, []int64) {
				var lasts []int64
				for _, last := range seen {
					if last >= sec-w+1 && last <= sec {
						lasts = append(lasts, last)
					}
				}
				slices.Sort(lasts)
				return int64(len(lasts)), lasts
			}
			check := func(batch int) {
				now := clock.Load()
				sec := windowtest.FloorDiv(now, 1000)
				for ip, seen := range refs {
					d, err := e.lim.Check(context.Background(), decide.Request{Action: "login_failed", Subjects: []decide.Subject{{Kind: "ip", Subject: ip}}})
					if err != nil {
						t.Fatal(err)
					}
					checks++
					var until int64
					for _, l := range limits {
						w := int64(l.Window / time.Second)
						if c, lasts := count(seen, sec, w); c >= l.Count {
							until = max(until, lasts[c+1-l.Count-1]+w)
						}
					}
					if d.Allowed != (until == 0) {
						t.Fatalf("batch %d ip %s at %d: allowed=%v, reference until %d (%v)", batch, ip, now, d.Allowed, until, seen)
					}
					if !d.Allowed {
						denies++
						if d.Denial.Until.Unix() != until {
							t.Fatalf("batch %d ip %s: retry %s, reference %s", batch, ip, d.Denial.Until, time.Unix(until, 0))
						}
					}
				}
			}
			for batch := range 200 {
				clock.Add(int64(rng.ExpFloat64() * 800))
				now := clock.Load()
				var evs []event.Event
				for range 1 + rng.IntN(5) {
					ip := "198.51.100." + strconv.Itoa(rng.IntN(5))
					for range 1 + rng.IntN(4) {
						ts := now - rng.Int64N(2000)
						ev := event.Event{V: 1, ID: event.NewID(), Action: "login_failed", Kind: "ip", Subject: ip, TS: time.UnixMilli(ts).UTC(), N: 1}
						if rng.Float64() < 0.9 { // some events name no e-mail
							email := "u" + strconv.Itoa(rng.IntN(25)) + "@example.com"
							ev.Attrs = map[string]string{"email": email}
							if refs[ip] == nil {
								refs[ip] = map[string]int64{}
							}
							refs[ip][email] = max(refs[ip][email], windowtest.FloorDiv(ts, 1000))
						}
						evs = append(evs, ev)
					}
				}
				e.applyBatch(t, evs, time.UnixMilli(now))
				check(batch)
				clock.Add(int64(rng.IntN(4000)))
				check(batch)
			}
			t.Logf("%d checks from memory (%d denied): 0 disagreements with the exact sets", checks, denies)
		})
	}
}
