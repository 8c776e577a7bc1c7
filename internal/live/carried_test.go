package live_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// A deny extension held back is carried past checkpoints while the state
// written is younger than RefreshDecisions, written once it is older; a
// new owner writes what its predecessor carried (even with no batch to
// apply), but not over an operator's unban.
func TestWriteBackCarriesHeldDecisionsPastCheckpoints(t *testing.T) {
	rdb, st, a := newHeldBackOwner(t, live.ApplierConfig{HoldDecisions: 7 * time.Second, RefreshDecisions: 30 * time.Second})
	ctx := context.Background()
	at := base.Add(time.Hour)
	sec := func(n int) time.Time { return at.Add(time.Duration(n) * time.Second) }
	b := &batcher{Topic: "wb"}
	x := window.Subject{Action: "act", Kind: "k", Subject: "x"}
	heldKey := st.Keys().CheckpointHeld("g", "wb", 0)
	// want checks x's deny record and state: count n, until +until s (the
	// state's a second later).
	want := func(what string, n int64, until int) {
		t.Helper()
		d := readDeny(t, rdb, st, x)
		if d == nil {
			t.Fatalf("%s: x has no deny record", what)
		}
		l := stateLimit(t, rdb, st, "x")
		if d.Count != n || l.Count != n || !d.Until.Equal(sec(until)) || !l.Until.Equal(sec(until+1)) {
			t.Fatalf("%s: record %d until %s, state %d until %s; want %d until %s", what, d.Count, d.Until, l.Count, l.Until, n, sec(until))
		}
	}
	carried := func(what string, want bool) {
		t.Helper()
		if n := rdb.Exists(ctx, heldKey).Val(); (n == 1) != want {
			t.Fatalf("%s: the slot holds carried decisions: %v, want %v", what, n == 1, want)
		}
	}
	apply := func(n int) batchT {
		t.Helper()
		bt := b.Batch(eventsOf("x", 1, sec(n))...)
		a.mustApply(bt, sec(n))
		return bt
	}
	checkpoint := func(n int) {
		t.Helper()
		if err := a.checkpoint(sec(n)); err != nil {
			t.Fatal(err)
		}
	}

	// 11 of 10/m, one a second: denied until the first leaves, +60s.
	var evs []eventT
	for i := range 11 {
		evs = append(evs, eventsOf("x", 1, sec(i))...)
	}
	a.mustApply(b.Batch(evs...), sec(10))
	want("the first deny", 11, 60)

	// Held back, then carried past two checkpoints: the state written at
	// +10s is younger than 30s. D moves past the batches all the same.
	second := apply(20)
	checkpoint(21)
	want("carried past a checkpoint", 11, 60)
	carried("carried past a checkpoint", true)
	if d := slotOffset(t, rdb, st); d <= second.Last {
		t.Fatalf("D %d after the checkpoint, want past %d", d, second.Last)
	}
	apply(30)
	checkpoint(31)
	want("carried past the next", 11, 60)
	// +41s: the state written at +10s is 31s old: written.
	checkpoint(41)
	want("written once the state is older than the refresh", 13, 62)
	carried("nothing held back", false)

	// Carried, then the owner dies. The next one has no batch to apply: its
	// first checkpoint writes what the last one carried.
	apply(45)
	checkpoint(46)
	want("carried again", 13, 62)
	a.resume(nil, sec(47))
	checkpoint(47)
	want("written by the next owner", 14, 63)
	carried("after the next owner's checkpoint", false)

	// Carried again (this owner writes x once before it holds anything),
	// then an operator unbans x and the owner dies: the next one must not
	// deny x again on what was carried.
	apply(48)
	apply(49)
	checkpoint(50)
	want("carried by the second owner", 15, 64)
	carried("carried by the second owner", true)
	w, err := operator.NewWriter(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Admin(ctx, sec(50), operator.AdminRequest{Op: operator.OpUnban, Subject: x, Operator: "o"}); err != nil {
		t.Fatal(err)
	}
	a.resume(nil, sec(51))
	checkpoint(51)
	if d := readDeny(t, rdb, st, x); d != nil {
		t.Fatalf("x unbanned, then denied again on a carried decision: %+v", d)
	}
	if n := rdb.HExists(ctx, st.Keys().State(0), window.Field(x)).Val(); n {
		t.Fatal("x unbanned, then given its carried state again")
	}
}
