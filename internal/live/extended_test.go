package live_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// TestApplyReportsExtensions: a deny record rewritten with a later until
// under the same rule and window is reported in Extended, not as a new
// decision; an escalation to another window is a new decision. With
// KeepRecords the record outlives its until by that much in Redis, and the
// script still treats it as none once until has passed.
func TestApplyReportsExtensions(t *testing.T) {
	rdb := stacktest.Redis(t)
	ctx := context.Background()
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: onePartition})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := live.NewApplier(st, live.ApplierConfig{KeepRecords: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	set := mustRules(t, `
rules:
  - name: login
    action: login_failed
    kinds: [ip]
    limits: [3/m, 6/h]
`)
	b := &batcher{Topic: "t"}
	sub := window.Subject{Action: "login_failed", Kind: "ip", Subject: "192.0.2.9"}
	apply := func(at time.Duration, n int) live.ApplyResult {
		t.Helper()
		now := base.Add(at)
		evs := make([]eventT, n)
		for i := range evs {
			evs[i] = ev(sub.Action, sub.Kind, sub.Subject, now)
		}
		res, err := ap.Apply(ctx, "g", b.Batch(evs...), set, now, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	type want struct {
		limit string
		until time.Duration
	}
	check := func(name string, got []window.DecisionMessage, w []want) {
		t.Helper()
		if len(got) != len(w) {
			t.Fatalf("%s: %d records %+v, want %d", name, len(got), got, len(w))
		}
		for i, d := range got {
			if d.Limit.String() != w[i].limit || !d.Until.Equal(base.Add(w[i].until)) {
				t.Fatalf("%s %d: %s until +%s, want %s until +%s", name, i, d.Limit, d.Until.Sub(base), w[i].limit, w[i].until)
			}
		}
	}

	res := apply(0, 4) // 4 in the minute: over 3/m until second 0 leaves
	check("decisions at 0s", res.Decisions, []want{{"3/1m", time.Minute}})
	check("extended at 0s", res.Extended, nil)
	res = apply(10*time.Second, 1) // 5: the 2nd event of second 0 must leave: still +60s
	check("extended at 10s", res.Extended, nil)
	res = apply(20*time.Second, 1) // 6 > 3 by 3: all of second 0 must leave, still +60s; not over 6/h
	check("decisions at 20s", res.Decisions, nil)
	res = apply(30*time.Second, 1) // 7: over 3/m until +60s, over 6/h until +1h: an escalation
	check("decisions at 30s", res.Decisions, []want{{"6/1h", time.Hour}})
	check("extended at 30s", res.Extended, nil)

	// A fresh subject: the same rule and window, later until: an extension.
	sub.Subject = "192.0.2.10"
	apply(2*time.Minute, 1)
	res = apply(2*time.Minute+time.Second, 3) // 4: second 2m0s must leave
	check("decisions at 2m1s", res.Decisions, []want{{"3/1m", 3 * time.Minute}})
	res = apply(2*time.Minute+5*time.Second, 1) // 5: second 2m1s must leave too
	check("decisions at 2m5s", res.Decisions, nil)
	check("extended at 2m5s", res.Extended, []want{{"3/1m", 3*time.Minute + time.Second}})

	// Kept past its until, the record is still in Redis but counts as none:
	// a deny after it is a new decision.
	key := st.Keys().Deny(0, sub)
	ttl, err := rdb.PTTL(ctx, key).Result()
	if err != nil || ttl < time.Hour {
		t.Fatalf("deny record ttl %s (%v), want its until + 1h kept", ttl, err)
	}
	res = apply(2*time.Hour, 4)
	check("decisions at 2h", res.Decisions, []want{{"3/1m", 2*time.Hour + time.Minute}})
	check("extended at 2h", res.Extended, nil)
}
