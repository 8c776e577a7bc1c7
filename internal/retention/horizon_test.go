package retention

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/history"
)

// A personal kind's rows past its horizon go at every tier, from the late
// events and from the totals (a total then counts what is kept); rows
// within it, and every row of other kinds, stay. A second run deletes
// nothing.
func TestRollerForgetsPastTheHorizon(t *testing.T) {
	e := newEnv(t, testLadder)
	ctx := context.Background()
	old, recent := now.Add(-20*24*time.Hour), now.Add(-2*time.Hour)
	evs := []ev{
		{action: "login_failed", kind: "ip", subject: "192.0.2.1", ts: old, n: 4},                          // past 10d: goes
		{action: "login_failed", kind: "ip", subject: "192.0.2.1", ts: recent, n: 1},                       // stays
		{action: "login_failed", kind: "ip", subject: "192.0.2.2", ts: old, n: 2},                          // goes, total too
		{action: "login_failed", kind: "ip", subject: "192.0.2.3", ts: now.Add(-9 * 24 * time.Hour), n: 3}, // within: stays
		{action: "visit", kind: "link", subject: "l1", ts: old, n: 5},                                      // not personal: stays
	}
	e.apply(t, evs)
	r := e.roller(t, testLadder, now)
	r.cfg.Horizons = map[string]time.Duration{"ip": 10 * 24 * time.Hour}
	rep, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var forgotten int64
	for _, f := range rep.Forgotten {
		if f.Kind != "ip" {
			t.Errorf("forgot rows of kind %s", f.Kind)
		}
		if f.Table != "history_totals" {
			forgotten += f.Events
		}
	}
	if forgotten != 6 {
		t.Errorf("forgot %d events of bucket rows (%+v), want 6", forgotten, rep.Forgotten)
	}
	count := func(kind, subject string) int64 {
		t.Helper()
		n, err := e.q.Count(ctx, history.Key{Action: map[string]string{"ip": "login_failed", "link": "visit"}[kind], Kind: kind, Subject: subject},
			now.Add(-365*24*time.Hour), now)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	total := func(kind, subject string) int64 {
		t.Helper()
		n, err := e.q.Total(ctx, history.Key{Action: map[string]string{"ip": "login_failed", "link": "visit"}[kind], Kind: kind, Subject: subject})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct {
		kind, subject string
		count, total  int64
	}{
		{"ip", "192.0.2.1", 1, 1},
		{"ip", "192.0.2.2", 0, 0},
		{"ip", "192.0.2.3", 3, 3},
		{"link", "l1", 5, 5},
	} {
		if got := count(c.kind, c.subject); got != c.count {
			t.Errorf("%s %s: count %d, want %d", c.kind, c.subject, got, c.count)
		}
		if got := total(c.kind, c.subject); got != c.total {
			t.Errorf("%s %s: total %d, want %d", c.kind, c.subject, got, c.total)
		}
	}
	var rows int64
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM floodgate.history_totals WHERE subject = '192.0.2.2'`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("total of a subject wholly past the horizon: %d rows, %v; want deleted", rows, err)
	}
	before := e.digest(t)
	rep, err = r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Forgotten) != 0 || e.digest(t) != before {
		t.Errorf("second run forgot %+v, want nothing", rep.Forgotten)
	}
}
