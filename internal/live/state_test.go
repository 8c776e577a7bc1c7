package live_test

import (
	"context"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// changes reads every entry of partition 0's change stream.
func changes(t *testing.T, rdb *redis.Client, st *window.Store) []window.Change {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), st.Keys().Log(0), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]window.Change, len(msgs))
	for i, m := range msgs {
		if out[i], err = window.ParseChange(m); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// A subject enters the state once it holds half a limit, carries its exact
// count and, once one more event would go over, the second it fits again;
// the snapshot and the change stream agree; entries have consecutive
// sequence numbers.
func TestStateFollowsTheSubject(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, `
rules:
  - name: r
    action: a
    kinds: [ip]
    limits: [4/1m]
`)
	ctx := context.Background()
	b := &batcher{Topic: "t"}
	sub := window.Subject{Action: "a", Kind: "ip", Subject: "192.0.2.9"}
	hr := live.NewHeadroom(100)
	apply := func(at time.Duration, n int) live.ApplyResult {
		t.Helper()
		var evs []eventT
		for range n {
			evs = append(evs, ev(sub.Action, sub.Kind, sub.Subject, base.Add(at)))
		}
		res, err := applierOf(t, st).Apply(ctx, "g", b.Batch(evs...), set, base.Add(at), hr)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// One event: under half of 4, nothing in the state, nothing written.
	if res := apply(0, 1); res.Changes != 0 || res.Evaluated != 1 {
		t.Fatalf("first event: changes %d evaluated %d, want 0 and 1", res.Changes, res.Evaluated)
	}
	// The second reaches half: count 2, one more still fits.
	if res := apply(time.Second, 1); res.Changes != 1 {
		t.Fatalf("second event: changes %d, want 1", res.Changes)
	}
	// Two more: 4 of 4, the next is the one over it; it fits again when the
	// first event leaves the minute.
	apply(2*time.Second, 2)
	snap, err := st.Snapshot(ctx, 0, base.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got, ok := snap.States[sub]
	if !ok || len(got.Limits) != 1 {
		t.Fatalf("snapshot %+v, want the subject with one limit", snap.States)
	}
	l := got.Limits[0]
	wantUntil := base.Add(time.Minute)
	if l.Rule != "r" || l.Count != 4 || !l.Until.Equal(wantUntil) || !got.At.Equal(base.Add(2*time.Second)) {
		t.Fatalf("state %+v at %s, want rule r count 4 until %s at %s", l, got.At, wantUntil, base.Add(2*time.Second))
	}
	cs := changes(t, rdb, st)
	if len(cs) != 2 || cs[0].Seq != 1 || cs[1].Seq != 2 || snap.Seq != 2 || snap.LastID != cs[1].ID {
		t.Fatalf("changes %+v, snapshot seq %d id %s: want seqs 1, 2 and the snapshot at the last", cs, snap.Seq, snap.LastID)
	}
	last := cs[1].States[0]
	if last.Subject != sub || last.State == nil || last.State.Limits[0] != l {
		t.Fatalf("last change %+v, want the snapshot's state", last)
	}
	// An hour later the window is empty: the next event finds the subject
	// at 1 of 4 and takes it out of the state.
	apply(time.Hour, 1)
	cs = changes(t, rdb, st)
	if n := len(cs); n != 3 || cs[2].States[0].State != nil {
		t.Fatalf("after the window passed: %d changes, last %+v; want a third removing the state", n, cs[n-1])
	}
}

// hourRule is one limit, 20/1h (near from 10 events), on action a by ip.
const hourRule = `
rules:
  - name: r
    action: a
    kinds: [ip]
    limits: [20/1h]
`

// Subjects far from every limit are counted without being evaluated: the
// headroom says a batch cannot have brought them near one.
func TestHeadroomSkipsSubjectsFarFromTheirLimits(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, hourRule)
	ctx := context.Background()
	b := &batcher{Topic: "t"}
	hr := live.NewHeadroom(100)
	evaluated := 0
	for i := range 12 {
		at := base.Add(time.Duration(i) * time.Second)
		res, err := applierOf(t, st).Apply(ctx, "g", b.Batch(ev("a", "ip", "192.0.2.1", at)), set, at, hr)
		if err != nil {
			t.Fatal(err)
		}
		evaluated += res.Evaluated
	}
	// Evaluated at the 1st event (headroom 10 - 1 = 9 left), then at the
	// 10th (9 events used it up: count 10 = half) and every event after.
	if evaluated != 4 {
		t.Fatalf("evaluated %d times over 12 events, want 4 (1st, then 10th..12th)", evaluated)
	}
	assertSum(t, st, window.Subject{Action: "a", Kind: "ip", Subject: "192.0.2.1"}, base.Add(12*time.Second), time.Hour, 12)
	cs := changes(t, rdb, st)
	if len(cs) != 3 || cs[0].States[0].State.Limits[0].Count != 10 {
		t.Fatalf("changes %+v, want three, the first at count 10", cs)
	}
	// Another writer of the partition (a stale owner, a rebuild): the
	// stored offset is not the one the headroom saw, so everything is
	// evaluated again.
	applyAsAnotherWriter(t, st, set, b, ev("a", "ip", "192.0.2.2", base))
	res, err := applierOf(t, st).Apply(ctx, "g", b.Batch(ev("a", "ip", "192.0.2.3", base)), set, base, hr)
	if err != nil {
		t.Fatal(err)
	}
	if res.Evaluated != 1 {
		t.Fatalf("after another writer: evaluated %d, want 1", res.Evaluated)
	}
}

// applyAsAnotherWriter applies e at b's next offset as another writer of the
// partition would (a stale owner, a rebuild: no headroom of its own), and
// moves b past it.
func applyAsAnotherWriter(t *testing.T, st *window.Store, set *rules.Set, b *batcher, e event.Event) {
	t.Helper()
	other := &batcher{Topic: b.Topic, Next: b.Next}
	if _, err := applierOf(t, st).Apply(context.Background(), "g", other.Batch(e), set, base, nil); err != nil {
		t.Fatal(err)
	}
	b.Next = other.Next
}

// The script is sent only the subjects it has more to do for than their
// increments; when another writer moved the partition it must evaluate
// them all, so it refuses the partial list and the batch goes again with
// every subject, counted once.
func TestAnotherWriterEvaluatesSubjectsLeftOut(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, hourRule)
	ctx := context.Background()
	b := &batcher{Topic: "t"}
	hr := live.NewHeadroom(100)
	far := window.Subject{Action: "a", Kind: "ip", Subject: "192.0.2.7"}
	for i, want := range []int{1, 0} { // new: evaluated; then far from 10: left out
		res, err := applierOf(t, st).Apply(ctx, "g", b.Batch(ev(far.Action, far.Kind, far.Subject, base)), set, base, hr)
		if err != nil || res.Evaluated != want {
			t.Fatalf("batch %d: %+v %v, want %d evaluated", i, res, err, want)
		}
	}
	applyAsAnotherWriter(t, st, set, b, ev("a", "ip", "192.0.2.8", base))
	res, err := applierOf(t, st).Apply(ctx, "g", b.Batch(ev(far.Action, far.Kind, far.Subject, base)), set, base, hr)
	if err != nil || res.Evaluated != 1 || res.Applied != 1 {
		t.Fatalf("after another writer: %+v %v, want the subject evaluated and its event applied once", res, err)
	}
	assertSum(t, st, far, base, time.Hour, 3)
}

// A run that fails part-way (a foreign key of another type under the
// prefix) writes nothing: no increment stays, the offset does not move, and
// the retry after the key is gone counts each event once.
func TestFailedApplyWritesNothing(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, loginRules)
	ctx := context.Background()
	b := &batcher{Topic: "t"}
	a := window.Subject{Action: "login_failed", Kind: "ip", Subject: "198.51.100.1"}
	z := window.Subject{Action: "login_failed", Kind: "ip", Subject: "198.51.100.2"}
	bt := b.Batch(ev(a.Action, a.Kind, a.Subject, base), ev(z.Action, z.Kind, z.Subject, base))
	// z's hour bucket is a string: its HINCRBY fails after a's were made.
	foreign := st.Keys().Bucket(0, z, 'h', base)
	if err := rdb.Set(ctx, foreign, "not a hash", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := applierOf(t, st).Apply(ctx, "g", bt, set, base, nil)
	if err == nil || !strings.Contains(err.Error(), "nothing written") {
		t.Fatalf("apply over a foreign key: %v, want a 'nothing written' error", err)
	}
	assertSum(t, st, a, base, time.Hour, 0)
	// (the hashes the run created are gone, not left at zero)
	if n, err := rdb.Exists(ctx, st.Keys().Bucket(0, a, 's', base), st.Keys().Bucket(0, a, 'h', base)).Result(); err != nil || n != 0 {
		t.Fatalf("hashes of the failed run: %d exist (%v), want none", n, err)
	}
	if _, ok, err := st.Resume(ctx, "g", "t", 0); err != nil || ok {
		t.Fatalf("offset stored after a failed run: %v %v", ok, err)
	}
	if err := rdb.Del(ctx, foreign).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := applierOf(t, st).Apply(ctx, "g", bt, set, base, nil); err != nil {
		t.Fatal(err)
	}
	assertSum(t, st, a, base, time.Hour, 1)
	assertSum(t, st, z, base, time.Hour, 1)
}

// With a dedup horizon, an event id counted once is skipped when it comes
// again (a producer's retry) — in a later batch or in the same one — until
// the horizon has passed.
func TestDedupSkipsARetriedEvent(t *testing.T) {
	rdb := stacktest.Redis(t)
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: onePartition})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := live.NewApplier(st, live.ApplierConfig{Dedup: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	set := mustRules(t, loginRules)
	ctx := context.Background()
	b := &batcher{Topic: "t"}
	sub := window.Subject{Action: "login_failed", Kind: "ip", Subject: "198.51.100.9"}
	e1, e2 := ev(sub.Action, sub.Kind, sub.Subject, base), ev(sub.Action, sub.Kind, sub.Subject, base)
	res, err := ap.Apply(ctx, "g", b.Batch(e1, e2, e1), set, base, nil)
	if err != nil || res.Applied != 2 || res.Duplicates != 1 {
		t.Fatalf("first batch: %+v %v, want 2 applied and the repeat skipped", res, err)
	}
	res, err = ap.Apply(ctx, "g", b.Batch(e2, ev(sub.Action, sub.Kind, sub.Subject, base)), set, base.Add(time.Minute), nil)
	if err != nil || res.Applied != 1 || res.Duplicates != 1 {
		t.Fatalf("retry batch: %+v %v, want the new event applied and the retry skipped", res, err)
	}
	assertSum(t, st, sub, base.Add(time.Minute), time.Hour, 3)
	later := base.Add(11 * time.Minute)
	res, err = ap.Apply(ctx, "g", b.Batch(e1), set, later, nil)
	if err != nil || res.Applied != 1 {
		t.Fatalf("after the horizon: %+v %v, want the id counted again", res, err)
	}
}

// A backlog's batch carries more ids than one Lua unpack takes: the dedup
// read must still answer for each of them.
func TestDedupLargeBatch(t *testing.T) {
	rdb := stacktest.Redis(t)
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: onePartition})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := live.NewApplier(st, live.ApplierConfig{Dedup: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	set := mustRules(t, loginRules)
	ctx := context.Background()
	b := &batcher{Topic: "t"}
	const n = 12000
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = ev("login_failed", "ip", "198.51.100."+strconv.Itoa(i%200), base)
	}
	res, err := ap.Apply(ctx, "g", b.Batch(evs...), set, base, nil)
	if err != nil || res.Applied != n {
		t.Fatalf("first batch: %+v %v, want %d applied", res, err, n)
	}
	// The same ids again (a producer retried the whole lot) plus one new.
	again := append(slices.Clone(evs), ev("login_failed", "ip", "198.51.100.1", base))
	res, err = ap.Apply(ctx, "g", b.Batch(again...), set, base, nil)
	if err != nil || res.Applied != 1 || res.Duplicates != n {
		t.Fatalf("retried batch: applied %d duplicates %d err %v, want 1 and %d", res.Applied, res.Duplicates, err, n)
	}
}

// The decisions relay reads entries without their states: the same
// sequence, offset and decisions, no states.
func TestParseChangeWithoutStates(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, `
rules:
  - name: r
    action: a
    kinds: [ip]
    limits: [2/1m]
`)
	b := &batcher{Topic: "t"}
	var evs []eventT
	for range 3 {
		evs = append(evs, ev("a", "ip", "192.0.2.7", base))
	}
	if _, err := applierOf(t, st).Apply(context.Background(), "g", b.Batch(evs...), set, base, nil); err != nil {
		t.Fatal(err)
	}
	msgs, err := rdb.XRange(context.Background(), st.Keys().Log(0), "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("change stream %v, %v: want one entry", msgs, err)
	}
	full, err := window.ParseChange(msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	lean, err := window.ParseChangeWithoutStates(msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(full.States) != 1 || len(full.Decisions) != 1 {
		t.Fatalf("entry %+v, want one state and one decision", full)
	}
	full.States = nil
	if !reflect.DeepEqual(lean, full) {
		t.Fatalf("without states %+v, want %+v", lean, full)
	}
}
