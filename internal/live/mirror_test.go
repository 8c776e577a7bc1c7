package live_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// The partition's copies of the buckets (mirror.go) hold only while the
// process applying with them is the partition's only writer. These tests
// write past them — an operator's reset, another owner's batch — and
// check the next batch is decided on what Redis holds.

const mirrorRules = `
rules:
  - name: r
    action: act
    kinds: [k]
    limits: [5/m, 50/d]
`

func denied(res live.ApplyResult, subject string) bool {
	for _, d := range append(res.Decisions, res.Extended...) {
		if d.Subject == subject && !d.Shadow {
			return true
		}
	}
	return false
}

// applyTimes applies a batch of n events of subject "a" at at.
func applyTimes(t *testing.T, st *window.Store, b *batcher, set *rules.Set, at time.Time, hr *live.Headroom, n int) live.ApplyResult {
	t.Helper()
	var evs []eventT
	for range n {
		evs = append(evs, ev("act", "k", "a", at))
	}
	res, err := applierOf(t, st).Apply(context.Background(), "g", b.Batch(evs...), set, at, hr)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestMirrorForgetsAfterOperatorReset(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, mirrorRules)
	ctx := context.Background()
	b := &batcher{Topic: "m"}
	hr := live.NewHeadroom(100)
	at := base.Add(10 * time.Second)
	apply := func(n int) live.ApplyResult { return applyTimes(t, st, b, set, at, hr, n) }
	apply(3)
	if res := apply(1); res.Mirrored != 1 {
		t.Fatalf("second batch: %d subjects evaluated from the copies, want 1", res.Mirrored)
	}
	sub := window.Subject{Action: "act", Kind: "k", Subject: "a"}
	if _, err := writerOf(t, st).Admin(ctx, at, operator.AdminRequest{Op: operator.OpReset, Subject: sub, Operator: "o", MaxWindow: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	// 4 counted before the reset: two more would be over 5/m on the copy.
	res := apply(2)
	if denied(res, "a") {
		t.Fatalf("denied on counts the reset deleted: %+v", res.Decisions)
	}
	if res.Mirrored != 0 {
		t.Fatalf("the batch after a reset was evaluated from stale copies (%d)", res.Mirrored)
	}
	states, err := st.Check(ctx, at, []window.Query{{Subject: sub, Windows: []time.Duration{time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	if states[0].Sums[0] != 2 {
		t.Fatalf("after reset and 2 events: %d in the minute, want 2", states[0].Sums[0])
	}
	// The copies come back, loaded afresh, and count on from Redis.
	res = apply(4)
	if !denied(res, "a") || res.Mirrored != 1 {
		t.Fatalf("6 in the minute: denied %v, from copies %d; want denied from the copies", denied(res, "a"), res.Mirrored)
	}
}

func TestMirrorForgetsAfterAnotherOwnerWrote(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	// Far from 20/m (under half of it), a batch changes no state and no
	// change sequence: only the stored offset tells another owner wrote.
	set := mustRules(t, `
rules:
  - name: r
    action: act
    kinds: [k]
    limits: [20/m]
`)
	b := &batcher{Topic: "m"}
	mine, theirs := live.NewHeadroom(100), live.NewHeadroom(100)
	at := base.Add(10 * time.Second)
	apply := func(hr *live.Headroom, n int) live.ApplyResult { return applyTimes(t, st, b, set, at, hr, n) }
	if res := apply(mine, 2); res.Mirrored != 1 {
		t.Fatalf("first batch: %d subjects evaluated from the copies, want 1", res.Mirrored)
	}
	apply(mine, 1) // far from the limit: not evaluated, the copy counts it
	// A rebalance: another process applies the next batch, then this one
	// gets the partition back. Its copy says 3; Redis holds 9.
	apply(theirs, 6)
	res := apply(mine, 12)
	if !denied(res, "a") {
		t.Fatalf("21 in the minute and no deny: %+v", res)
	}
	if res.Mirrored != 0 {
		t.Fatalf("evaluated from copies (%d) that miss another owner's batch", res.Mirrored)
	}
}
