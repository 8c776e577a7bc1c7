package retention

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/history"
)

// yearOfVisits is a year of visits before now to link "a" (light days, and
// campaign days with thousands of visitors) and link "b" (a few hundred
// regulars, some also visitors of a), and visits without an ip.
func yearOfVisits(r *rand.Rand) []ev {
	var out []ev
	campaign := map[int]bool{}
	for len(campaign) < 12 {
		campaign[3+r.IntN(360)] = true
	}
	for day := 0; day < 365; day++ {
		start := now.Add(-time.Duration(day+1) * 24 * time.Hour)
		visits := 60
		if campaign[day] {
			visits = 2500
		}
		for range visits {
			ip := fmt.Sprintf("198.51.%d.%d", r.IntN(40), r.IntN(256)) // 10 240 occasional visitors
			if r.IntN(3) == 0 {
				ip = fmt.Sprintf("203.0.113.%d", r.IntN(200)) // 200 regulars
			}
			if r.IntN(20) == 0 {
				ip = "" // counted as a visit, adds no visitor
			}
			out = append(out, ev{"visit", "link", "a", start.Add(time.Duration(r.Int64N(int64(24 * time.Hour)))), 1, ip})
		}
		for range 20 {
			out = append(out, ev{"visit", "link", "b", start.Add(time.Duration(r.Int64N(int64(24 * time.Hour)))), 1,
				fmt.Sprintf("203.0.113.%d", 100+r.IntN(300))})
		}
	}
	return out
}

// TestRollerMergesVisitorsOverAYear is issue 16's "done when": a year of
// visits goes through the sink into minute buckets, the roller merges their
// sketches down a ladder (1m → 5m → 1h → 1d), and a daily curve of unique
// visitors over the year, the year's visitors and the all-time ones come
// back from SQL exact up to 256 and within 2% above.
func TestRollerMergesVisitorsOverAYear(t *testing.T) {
	const ladder = "1m:2d,5m:14d,1h:90d,1d:forever"
	e := newEnv(t, ladder)
	ctx := context.Background()
	evs := yearOfVisits(rand.New(rand.NewPCG(16, 3)))
	e.apply(t, evs)
	l, _ := history.ParseLadder(ladder)
	// A week of minutes per roll transaction: fewer chunks for a year.
	r, err := New(Config{Pool: e.pool, Ladder: l, Now: func() time.Time { return now }, ChunkBuckets: 7 * 24 * 60})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d visits; rolled %+v", len(evs), rep.Tiers)
	e.checkLadder(t, l, now)
	first := e.digest(t)
	if _, err := r.RunOnce(ctx); err != nil || e.digest(t) != first {
		t.Fatalf("a second roller run changed history (err %v)", err)
	}

	var worst float64
	within := func(what string, got, want int64) {
		t.Helper()
		if want <= 256 {
			if got != want {
				t.Errorf("%s: %d visitors, want exactly %d", what, got, want)
			}
			return
		}
		rel := float64(got-want) / float64(want)
		worst = max(worst, rel, -rel)
		if rel > 0.02 || rel < -0.02 {
			t.Errorf("%s: %d visitors, want %d within 2%% (%+.2f%%)", what, got, want, 100*rel)
		}
	}
	from, to := history.Bin(now.Add(-366*24*time.Hour), 24*time.Hour), now.Add(time.Minute)
	for _, subject := range []string{"a", "b", ""} {
		k := history.Key{Action: "visit", Subject: subject}
		curve, err := e.q.VisitorsCurve(ctx, k, from, to, 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		dense := 0
		for _, p := range curve {
			want := expectVisitors(evs, subject, p.Time, p.Time.Add(24*time.Hour))
			within(fmt.Sprintf("%v on %s", k, p.Time.Format(time.DateOnly)), p.Visitors, want)
			if want > 256 {
				dense++
			}
			if n := expectCount(evs, "visit", subject, p.Time, p.Time.Add(24*time.Hour)); p.Events != n {
				t.Errorf("%v on %s: %d events, want %d", k, p.Time.Format(time.DateOnly), p.Events, n)
			}
		}
		got, err := e.q.Visitors(ctx, k, from, to)
		if err != nil {
			t.Fatal(err)
		}
		want := expectVisitors(evs, subject, from, to)
		within(fmt.Sprintf("%v over the year", k), got, want)
		tot, err := e.q.TotalVisitors(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		within(fmt.Sprintf("%v all time", k), tot, want)
		t.Logf("%v: %d points, %d of them above 256; the year: %d visitors, %d estimated", k, len(curve), dense, want, got)
	}
	t.Logf("worst relative error above 256: %.3f%%", 100*worst)
	top, err := e.q.TopVisitors(ctx, "visit", "", from, to, 5)
	if err != nil || len(top) != 2 || top[0].Subject != "a" || top[1].Subject != "b" {
		t.Errorf("top visitors = %+v, %v", top, err)
	}
}
