package live_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"

	"github.com/redis/go-redis/v9"
)

// Write-back keeps counts in the owner's memory past the checkpoint. These
// tests make the cases it must get right happen on purpose: a stale owner
// after a rebalance, and an operator's reset while a new owner replays.

// wbOwner is one process owning partition 0 in write-back.
type wbOwner struct {
	t   *testing.T
	ap  *live.Applier
	hr  *live.Headroom
	set *rules.Set
}

func newOwner(t *testing.T, st *window.Store, set *rules.Set) *wbOwner {
	return newOwnerWith(t, st, set, live.ApplierConfig{})
}

// newOwnerWith is newOwner with more of the Applier's configuration.
func newOwnerWith(t *testing.T, st *window.Store, set *rules.Set, cfg live.ApplierConfig) *wbOwner {
	cfg.WriteBack = true
	ap, err := live.NewApplier(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &wbOwner{t: t, ap: ap, hr: live.NewHeadroom(1000), set: set}
}

func (o *wbOwner) apply(b batchT, at time.Time) (live.ApplyResult, error) {
	return o.ap.Apply(context.Background(), "g", b, o.set, at, o.hr)
}

func (o *wbOwner) mustApply(b batchT, at time.Time) live.ApplyResult {
	o.t.Helper()
	res, err := o.apply(b, at)
	if err != nil {
		o.t.Fatal(err)
	}
	return res
}

func (o *wbOwner) checkpoint(at time.Time) error {
	_, err := o.ap.Checkpoint(context.Background(), "g", "wb", 0, o.hr, at)
	return err
}

// resume starts the owner afresh and hands it the batches from its
// checkpoint on, as the aggregator does after a start.
func (o *wbOwner) resume(batches []batchT, at time.Time) live.ApplyResult {
	o.t.Helper()
	o.hr = live.NewHeadroom(1000)
	next, _, err := o.ap.Resume(context.Background(), "g", "wb", 0, o.hr)
	if err != nil {
		o.t.Fatal(err)
	}
	var total live.ApplyResult
	for _, b := range batches {
		if b.Last < next {
			continue
		}
		res := o.mustApply(consume.TrimBatch(b, max(next, b.First)), at)
		total.Replayed += res.Replayed
		total.ResetSkipped += res.ResetSkipped
		total.PartSkipped += res.PartSkipped
		total.Applied += res.Applied
		total.Duplicates += res.Duplicates
		total.Decisions = append(total.Decisions, res.Decisions...)
		total.Extended = append(total.Extended, res.Extended...)
	}
	return total
}

func countOf(t *testing.T, st *window.Store, subject string, at time.Time) int64 {
	t.Helper()
	return countOfAction(t, st, "act", subject, at)
}

func countOfAction(t *testing.T, st *window.Store, action, subject string, at time.Time) int64 {
	t.Helper()
	states, err := st.Check(context.Background(), at, []window.Query{{
		Subject: window.Subject{Action: action, Kind: "k", Subject: subject}, Windows: []time.Duration{24 * time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	return states[0].Sums[0]
}

func eventsOf(subject string, n int, at time.Time) []eventT {
	evs := make([]eventT, n)
	for i := range evs {
		evs[i] = ev("act", "k", subject, at)
	}
	return evs
}

// actPerDay is the rules of most write-back tests: one limit a day on
// action act, kind k.
const actPerDay = `
rules:
  - name: r
    action: act
    kinds: [k]
    limits: [1000/d]
`

func TestWriteBackStaleOwnerIsFenced(t *testing.T) {
	st := newStore(t, stacktest.Redis(t))
	set := mustRules(t, actPerDay)
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	a := newOwner(t, st, set)
	var batches []batchT
	next := func(n int) batchT {
		bt := b.Batch(eventsOf("x", n, at)...)
		batches = append(batches, bt)
		return bt
	}
	a.mustApply(next(3), at)
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	a.mustApply(next(4), at) // in A's memory only
	if got := countOf(t, st, "x", at); got != 3 {
		t.Fatalf("Redis holds %d before the next checkpoint, want the checkpoint's 3", got)
	}

	// A rebalance: B resumes at the checkpoint, is handed the batch A
	// holds in memory and one more, and checkpoints.
	bo := newOwner(t, st, set)
	bo.resume(batches, at)
	bo.mustApply(next(5), at)
	if err := bo.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	if got := countOf(t, st, "x", at); got != 12 {
		t.Fatalf("after B's checkpoint: %d, want 12", got)
	}

	// A still believes it owns the partition: its checkpoint is refused,
	// and its next batch (the one B applied after its memory) sends it to
	// B's checkpoint.
	if err := a.checkpoint(at); err == nil {
		t.Fatal("the stale owner's checkpoint was accepted")
	}
	_, err := a.apply(batches[2], at)
	var rw *consume.RewindError
	if !errors.As(err, &rw) || rw.Next != 12 || rw.Reason == "" {
		t.Fatalf("stale owner's next batch: %v, want a rewind to 12 from B's checkpoint", err)
	}
	if got := countOf(t, st, "x", at); got != 12 {
		t.Fatalf("after the stale owner's attempts: %d, want 12", got)
	}
}

func TestWriteBackResetDuringReplay(t *testing.T) {
	st := newStore(t, stacktest.Redis(t))
	// Over 5/m from x's 6th event on, and y at 5/m blocks: every batch
	// writes a decision at once (a state that only changes counts waits for
	// the checkpoint), so the decisions offset D runs ahead of it.
	set := mustRules(t, `
rules:
  - name: r
    action: act
    kinds: [k]
    limits: [5/m, 1000/d]
`)
	ctx := context.Background()
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	a := newOwner(t, st, set)
	var batches []batchT
	apply := func(subject string, n int) {
		bt := b.Batch(eventsOf(subject, n, at)...)
		batches = append(batches, bt)
		a.mustApply(bt, at)
	}
	apply("x", 6)
	apply("y", 2)
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	apply("x", 2) // offsets 8-9, in memory, D moves past them
	apply("y", 3) // 10-12
	apply("x", 1) // 13

	// The operator resets x while A's memory is past the checkpoint.
	sub := window.Subject{Action: "act", Kind: "k", Subject: "x"}
	w, err := operator.NewWriter(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Admin(ctx, at, operator.AdminRequest{Op: operator.OpReset, Subject: sub, Operator: "o",
		MaxWindow: 24 * time.Hour, Group: "g", Topic: "wb"}); err != nil {
		t.Fatal(err)
	}
	// A notices at its checkpoint (the change sequence moved) and starts
	// again from the checkpoint: x's events before the reset's offset are
	// dropped, y's all counted, x's after the reset counted.
	if err := a.checkpoint(at); err == nil {
		t.Fatal("checkpoint accepted over an operator's reset")
	}
	replay := a.resume(batches, at)
	apply("x", 2) // after the reset
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	if replay.ResetSkipped != 3 {
		t.Fatalf("replay dropped %d of x's events, want the 3 before the reset", replay.ResetSkipped)
	}
	if x, y := countOf(t, st, "x", at), countOf(t, st, "y", at); x != 2 || y != 5 {
		t.Fatalf("after reset and replay: x %d (want 2, the events after the reset), y %d (want 5)", x, y)
	}
}

// A stale owner whose batch has a verdict to write (decide.lua) is refused
// on the decisions offset another owner moved, writes nothing, and reads
// the partition again from the checkpoint.
func TestWriteBackStaleOwnerDecisionsAreFenced(t *testing.T) {
	st := newStore(t, stacktest.Redis(t))
	set := mustRules(t, `
rules:
  - name: r
    action: act
    kinds: [k]
    limits: [10/m]
`)
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	a := newOwner(t, st, set)
	first := b.Batch(eventsOf("x", 6, at)...) // near 10/m: a state to write
	a.mustApply(first, at)
	bo := newOwner(t, st, set)
	bo.resume([]batchT{first}, at)
	second := b.Batch(eventsOf("x", 6, at)...) // 12 in the minute: a deny
	if res := bo.mustApply(second, at); !denied(res, "x") {
		t.Fatalf("new owner: 12 in the minute and no deny: %+v", res)
	}
	// A, stale, is handed a batch after its memory: 10 in its minute, a
	// state that blocks (written at once), which would go over B's.
	res, err := a.apply(b.Batch(eventsOf("x", 4, at)...), at)
	var rw *consume.RewindError
	if !errors.As(err, &rw) || rw.Reason == "" {
		t.Fatalf("stale owner's verdict: %+v, %v; want a rewind", res, err)
	}
	if len(res.Decisions) > 0 {
		t.Fatalf("stale owner decided %+v", res.Decisions)
	}
}

// A Redis failover can lose what a batch wrote after the last checkpoint
// while C and the change sequence survive: a script-counted subject's
// increments and the D they moved. The owner's next checkpoint is refused
// on D, and its next batch reads the partition again from C: the lost
// batch is counted again, not dropped under a checkpoint that succeeds.
func TestWriteBackLostBatchIsCountedAgain(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, `
rules:
  - {name: r, action: act, kinds: [k], limits: [1000/d]}
  - {name: b, action: bkt, kinds: [k], limits: [1000/d], bucket: {rate: 1/s, burst: 1000}}
`)
	ctx := context.Background()
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	a := newOwner(t, st, set)
	var batches []batchT
	apply := func(evs ...eventT) {
		bt := b.Batch(evs...)
		batches = append(batches, bt)
		a.mustApply(bt, at)
	}
	apply(append(eventsOf("x", 3, at), ev("bkt", "k", "y", at))...)
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	replica := snapshot(t, rdb, st.Keys().Slot(0))
	seq0, _ := rdb.Get(ctx, st.Keys().Seq(0)).Int64()
	apply(ev("bkt", "k", "y", at), ev("bkt", "k", "y", at)) // the script counts y
	if seq, _ := rdb.Get(ctx, st.Keys().Seq(0)).Int64(); seq != seq0 {
		t.Fatalf("the batch moved the change sequence (%d, was %d): the test proves nothing", seq, seq0)
	}
	replica.promote(t)

	if err := a.checkpoint(at); err == nil {
		t.Fatal("a checkpoint over a batch Redis lost was accepted")
	}
	_, err := a.apply(b.Batch(eventsOf("x", 1, at)...), at)
	var rw *consume.RewindError
	if !errors.As(err, &rw) || rw.Next != batches[1].First {
		t.Fatalf("owner's next batch: %v, want a rewind to the checkpoint %d", err, batches[1].First)
	}
	a.resume(batches, at)
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	if got := countOfAction(t, st, "bkt", "y", at); got != 3 {
		t.Fatalf("y: Redis holds %d, want 3", got)
	}
	if got := countOf(t, st, "x", at); got != 3 {
		t.Fatalf("x: Redis holds %d, want 3", got)
	}
}

// slotCopy is a partition slot's keys as a replica cut off at one moment
// holds them.
type slotCopy struct {
	rdb    *redis.Client
	prefix string
	dumps  map[string]string
	ttls   map[string]time.Duration
}

func snapshot(t *testing.T, rdb *redis.Client, slot string) *slotCopy {
	t.Helper()
	ctx := context.Background()
	c := &slotCopy{rdb: rdb, prefix: slot, dumps: map[string]string{}, ttls: map[string]time.Duration{}}
	keys, err := rdb.Keys(ctx, redisGlob(slot)+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		d, err := rdb.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		c.dumps[k] = d
		c.ttls[k] = max(rdb.PTTL(ctx, k).Val(), 0)
	}
	return c
}

// promote replaces the slot's keys with the copy: the primary died and
// its replica took over.
func (c *slotCopy) promote(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	keys, err := c.rdb.Keys(ctx, redisGlob(c.prefix)+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		if err := c.rdb.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for k, d := range c.dumps {
		if err := c.rdb.Restore(ctx, k, c.ttls[k], d).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// redisGlob escapes a key prefix for KEYS (slots are in braces).
func redisGlob(s string) string {
	r := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)
	return r.Replace(s)
}

// A rules change checkpoints first: no replay crosses it (which subjects
// memory counts depends on the rules). A reload of the same text is no
// change.
func TestWriteBackRulesChangeCheckpointsFirst(t *testing.T) {
	st := newStore(t, stacktest.Redis(t))
	const text = `
rules:
  - name: r
    action: act
    kinds: [k]
    limits: [1000/d]
`
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	o := newOwner(t, st, mustRules(t, text))
	o.mustApply(b.Batch(eventsOf("x", 3, at)...), at)
	if got := countOf(t, st, "x", at); got != 0 {
		t.Fatalf("before any checkpoint Redis holds %d", got)
	}
	o.set = mustRules(t, text) // reloaded, unchanged: another *rules.Set
	o.mustApply(b.Batch(eventsOf("x", 2, at)...), at)
	if got := countOf(t, st, "x", at); got != 0 {
		t.Fatalf("after a reload of the same rules Redis holds %d, want no checkpoint yet", got)
	}
	o.set = mustRules(t, strings.Replace(text, "1000/d", "2000/d", 1))
	o.mustApply(b.Batch(eventsOf("x", 1, at)...), at)
	if got := countOf(t, st, "x", at); got != 5 {
		t.Fatalf("after a rules change Redis holds %d, want the 5 counted under the old rules", got)
	}
}

// A rules change between a crash and the next owner's start: the new
// owner replays C..D under the rules its predecessor counted them under
// (kept with C), not its own. Here the change swaps which subject memory
// counts and which the script does; replayed under the new rules, x's
// replayed events would be dropped and y's counted twice.
func TestWriteBackReplaysUnderTheRulesCountedUnder(t *testing.T) {
	st := newStore(t, stacktest.Redis(t))
	before := mustRules(t, `
rules:
  - {name: r, action: act, kinds: [k], limits: [1000/d]}
  - {name: b, action: bkt, kinds: [k], limits: [1000/d], bucket: {rate: 1/s, burst: 1000}}
`)
	after := mustRules(t, `
rules:
  - {name: r, action: act, kinds: [k], limits: [1000/d], bucket: {rate: 1/s, burst: 1000}}
  - {name: b, action: bkt, kinds: [k], limits: [1000/d]}
`)
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	evs := func(x, y int) []eventT {
		out := eventsOf("x", x, at)
		for range y {
			out = append(out, ev("bkt", "k", "y", at))
		}
		return out
	}
	a := newOwner(t, st, before)
	first, second := b.Batch(evs(3, 1)...), b.Batch(evs(2, 2)...)
	a.mustApply(first, at)
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	a.mustApply(second, at) // x in A's memory, y written by the script; then A dies

	bo := newOwner(t, st, after)
	if res := bo.resume([]batchT{first, second}, at); res.Replayed != 4 {
		t.Fatalf("replayed %d events, want the second batch's 4", res.Replayed)
	}
	bo.mustApply(b.Batch(evs(1, 1)...), at)
	if err := bo.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	if got := countOf(t, st, "x", at); got != 6 {
		t.Errorf("x: Redis holds %d, want 6", got)
	}
	if got := countOfAction(t, st, "bkt", "y", at); got != 4 {
		t.Errorf("y: Redis holds %d, want 4", got)
	}
}

// Rules kept with C that this process cannot parse (a newer version
// wrote them) refuse the resume when there is a replay to make under them:
// a replay under other rules is not exact. With nothing to replay they do
// not matter.
func TestWriteBackResumeRefusesRulesItCannotRead(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, "rules:\n  - {name: r, action: act, kinds: [k], limits: [2/m, 1000/d]}\n")
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	a := newOwner(t, st, set)
	a.mustApply(b.Batch(eventsOf("x", 1, at)...), at)
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	key := st.Keys().CheckpointRules("g", "wb", 0)
	if err := rdb.Set(context.Background(), key, "rules:\n  - {name: r, future: yes}\n", 0).Err(); err != nil {
		t.Fatal(err)
	}
	resume := func() error {
		_, _, err := a.ap.Resume(context.Background(), "g", "wb", 0, live.NewHeadroom(1000))
		return err
	}
	if err := resume(); err != nil {
		t.Fatalf("resume with nothing to replay: %v", err)
	}
	if res := a.mustApply(b.Batch(eventsOf("x", 3, at)...), at); !denied(res, "x") {
		t.Fatalf("4 in the minute over 2/m and no deny: %+v", res) // D moves past C
	}
	if err := resume(); err == nil || !strings.Contains(err.Error(), "cannot be replayed exactly") {
		t.Fatalf("resume over unreadable rules with a replay to make: %v", err)
	}
}

// A sink evaluating every subject by the script has no write-back: its
// batches and timers leave checkpoints alone.
func TestSinkEvaluateAllWritesThrough(t *testing.T) {
	st := newStore(t, stacktest.Redis(t))
	set := mustRules(t, actPerDay)
	sink, err := live.NewSink(live.SinkConfig{Applier: applierOf(t, st), Group: "g", EvaluateAll: true,
		Rules: func() *rules.Set { return set }})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	b := &batcher{Topic: "wb"}
	if err := sink.Apply(context.Background(), b.Batch(eventsOf("x", 4, at)...)); err != nil {
		t.Fatal(err)
	}
	if got := countOf(t, st, "x", at); got != 4 {
		t.Fatalf("write-through sink: Redis holds %d, want 4", got)
	}
	wbAp, err := live.NewApplier(st, live.ApplierConfig{WriteBack: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := live.NewSink(live.SinkConfig{Applier: wbAp, Group: "g", EvaluateAll: true, Rules: func() *rules.Set { return set }}); err == nil {
		t.Fatal("a write-back sink evaluating all by the script was accepted")
	}
}

// Memory past MaxPending fields is written at once, whatever the interval.
func TestSinkCheckpointsPastMaxPending(t *testing.T) {
	st := newStore(t, stacktest.Redis(t))
	set := mustRules(t, actPerDay)
	ap, err := live.NewApplier(st, live.ApplierConfig{WriteBack: true})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := live.NewSink(live.SinkConfig{Applier: ap, Group: "g", Rules: func() *rules.Set { return set },
		CheckpointEvery: time.Hour, MaxPending: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := sink.Resume(ctx, "wb", 0); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	b := &batcher{Topic: "wb"}
	for i, s := range []string{"x", "y", "z"} {
		if err := sink.Apply(ctx, b.Batch(eventsOf(s, i+1, at)...)); err != nil {
			t.Fatal(err)
		}
		// one subject's second, minute and hour fields: 3, the bound
		if got := countOf(t, st, s, at); got != int64(i+1) {
			t.Fatalf("subject %s: Redis holds %d after its batch, want %d (checkpointed at the bound)", s, got, i+1)
		}
	}
}

// With a dedup horizon, a write-back owner keeps the ids it counted into
// memory and writes them with the checkpoint: a retry is skipped whether
// its first count is in Redis or only in memory, and a new owner replaying
// from the checkpoint counts each event once and skips the same retries.
func TestWriteBackDedupAcrossAReplay(t *testing.T) {
	st := newStore(t, stacktest.Redis(t))
	// Near 4/m from the 2nd event: every batch writes the subject's state,
	// so D runs ahead of the checkpoint and a new owner replays.
	set := mustRules(t, `
rules:
  - name: r
    action: act
    kinds: [k]
    limits: [4/m, 1000/d]
`)
	owner := func() *wbOwner { return newOwnerWith(t, st, set, live.ApplierConfig{Dedup: 10 * time.Minute}) }
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	e := eventsOf("x", 5, at)
	a := owner()
	var batches []batchT
	apply := func(o *wbOwner, applied, dups int, evs ...eventT) {
		t.Helper()
		bt := b.Batch(evs...)
		batches = append(batches, bt)
		if res := o.mustApply(bt, at); res.Applied != applied || res.Duplicates != dups {
			t.Fatalf("batch %d-%d: applied %d, duplicates %d; want %d and %d", bt.First, bt.Last, res.Applied, res.Duplicates, applied, dups)
		}
	}
	apply(a, 2, 1, e[0], e[1], e[0])
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	apply(a, 1, 2, e[2], e[0], e[2]) // e0's first count is in Redis; e2 twice here
	apply(a, 1, 0, e[3])
	apply(a, 1, 1, e[3], e[4]) // e3's first count is in memory only
	if got := countOf(t, st, "x", at); got != 2 {
		t.Fatalf("Redis holds %d before the next checkpoint, want the checkpoint's 2", got)
	}

	// A crash: B resumes at the checkpoint and is handed everything after.
	bo := owner()
	if got := bo.resume(batches, at); got.Replayed == 0 || got.Applied != 3 || got.Duplicates != 3 {
		t.Fatalf("the new owner replayed %d, applied %d, skipped %d; want a replay applying 3 and skipping 3", got.Replayed, got.Applied, got.Duplicates)
	}
	if err := bo.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	if got := countOf(t, st, "x", at); got != 5 {
		t.Fatalf("after the new owner's checkpoint: %d, want 5", got)
	}
	// The ids went with the checkpoint: a retry now is found in Redis.
	apply(bo, 0, 2, e[3], e[4])
}

// A checkpoint larger than CheckpointPart goes in parts, C moving with the
// last. Here the second part fails (a foreign key of another type where
// one of its subjects' buckets goes), after the first is written: the
// owner forgets its memory, and the next owner replays from C, skipping
// the records the first part wrote. Without the part's mark, a would be
// counted twice.
func TestWriteBackCheckpointInParts(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, `
rules:
  - name: r
    action: act
    kinds: [k]
    limits: [100/m, 1000/d]
`)
	// 1/d: second, minute and hour fields, three per subject: each subject
	// is a part of its own
	owner := func() *wbOwner { return newOwnerWith(t, st, set, live.ApplierConfig{CheckpointPart: 3}) }
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	a := owner()
	batches := []batchT{b.Batch(append(eventsOf("a", 2, at), eventsOf("c", 2, at)...)...)}
	a.mustApply(batches[0], at)
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, redisGlob(st.Keys().SubjectPrefix(0, window.Subject{Action: "act", Kind: "k", Subject: "a"}))+"s:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("a's seconds: %v, %v", keys, err)
	}
	foreign := strings.Replace(keys[0], ":a:", ":b:", 1)
	if err := rdb.Set(ctx, foreign, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	batches = append(batches, b.Batch(ev("act", "k", "a", at), ev("act", "k", "b", at), ev("act", "k", "c", at)))
	a.mustApply(batches[1], at)
	if err := a.checkpoint(at); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("checkpoint over a foreign key: %v, want its WRONGTYPE", err)
	}
	if got := countOf(t, st, "a", at); got != 3 {
		t.Fatalf("after the first part, Redis holds %d of a, want 3", got)
	}
	if got := countOf(t, st, "c", at); got != 2 {
		t.Fatalf("c's part never ran: Redis holds %d of it, want the checkpoint's 2", got)
	}
	// The owner itself resumes from C with its next batch: the part moved
	// D past the batch, which it replays.
	if res, err := a.apply(batches[1], at); err != nil || res.Applied != 2 || res.PartSkipped != 1 {
		t.Fatalf("the owner's next batch: %v, applied %d, skipped %d as written by a part; want 2 and 1", err, res.Applied, res.PartSkipped)
	}

	// So does another owner (a crash between the parts).
	bo := owner()
	got := bo.resume(batches, at)
	if got.Applied != 2 || got.PartSkipped != 1 {
		t.Fatalf("the next owner applied %d and skipped %d as written by a part; want 2 and 1", got.Applied, got.PartSkipped)
	}
	// While the fault lasts, a resumed owner's checkpoint goes in one run:
	// it fails whole, keeps the memory and adds no mark.
	marks := st.Keys().CheckpointMarks("g", "wb", 0)
	if err := bo.checkpoint(at); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("checkpoint over the foreign key again: %v, want its WRONGTYPE", err)
	}
	if n, err := rdb.HLen(ctx, marks).Result(); err != nil || n != 1 {
		t.Fatalf("marks after a failed retry: %d, %v; want the first part's only", n, err)
	}
	if err := rdb.Del(ctx, foreign).Err(); err != nil {
		t.Fatal(err)
	}
	if err := bo.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	for sub, want := range map[string]int64{"a": 3, "b": 1, "c": 3} {
		if got := countOf(t, st, sub, at); got != want {
			t.Errorf("%s: %d, want %d", sub, got, want)
		}
	}
	if n, err := rdb.HLen(ctx, marks).Result(); err != nil || n != 0 {
		t.Fatalf("marks left after C moved past them: %d, %v", n, err)
	}
}

// Moving a partition's offset back (the topic was recreated) drops C and
// the marks of checkpoint parts with it: their offsets are of the old log.
func TestResetOffsetDropsCheckpointMarks(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	ap := applierOf(t, st)
	ctx := context.Background()
	k := st.Keys()
	if err := rdb.Set(ctx, k.Checkpoint("g", "wb", 0), 90, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, k.Offset("g", "wb", 0), 120, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, k.CheckpointMarks("g", "wb", 0), "110/x-0", `["act:k:a"]`).Err(); err != nil {
		t.Fatal(err)
	}
	if err := ap.ResetOffset(ctx, "g", "wb", 0, 90, 0); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{k.Checkpoint("g", "wb", 0), k.CheckpointMarks("g", "wb", 0)} {
		if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Errorf("%s left: %d, %v", key, n, err)
		}
	}
}

// A state that changes only the counts a limiter reports waits for the
// checkpoint; one that blocks is written at once, and so is a deny.
func TestWriteBackHoldsCountOnlyStatesUntilCheckpoint(t *testing.T) {
	rdb, st, a := newHeldBackOwner(t, live.ApplierConfig{})
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	stateCount := func() (count int64, blocks bool) {
		t.Helper()
		l := stateLimit(t, rdb, st, "x")
		return l.Count, !l.Until.IsZero()
	}
	offset := func() int64 { t.Helper(); return slotOffset(t, rdb, st) }

	// Near, over a slot the owner read holds no state: held back too.
	a.mustApply(b.Batch(eventsOf("x", 6, at)...), at)
	if rdb.HExists(context.Background(), st.Keys().State(0), "act:k:x").Val() {
		t.Fatal("a first state that does not block, over none, was written at once")
	}
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	if c, _ := stateCount(); c != 6 {
		t.Fatalf("first state says %d after the checkpoint, want 6", c)
	}
	d := offset()
	a.mustApply(b.Batch(eventsOf("x", 2, at)...), at)
	if c, _ := stateCount(); c != 6 || offset() != d {
		t.Fatalf("a count-only change was written at once: state %d (want 6), D %d (want %d)", c, offset(), d)
	}
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	if c, blocks := stateCount(); c != 8 || blocks {
		t.Fatalf("after the checkpoint the state says %d (blocks %v), want 8", c, blocks)
	}
	a.mustApply(b.Batch(eventsOf("x", 2, at)...), at) // 10 of 10: no room left
	if c, blocks := stateCount(); c != 10 || !blocks {
		t.Fatalf("a state that blocks waited: %d, blocks %v", c, blocks)
	}
	res := a.mustApply(b.Batch(eventsOf("x", 1, at)...), at)
	if !denied(res, "x") {
		t.Fatalf("11 of 10 and no deny: %+v", res)
	}
}

// decide.lua writes deny records and decisions from JSON built in Go: a
// message and a subject that need escaping come back whole, a key's name
// inside the message is not taken for the record's own, and an extension
// keeps the record's "since".
func TestWriteBackDecisionJSONRoundTrips(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	msg := `slow down: "until":1,"since":2,"rule":"x","window":"1s" \ é </>`
	set := mustRules(t, `
rules:
  - name: r
    action: act
    kinds: [k]
    limits: [3/m]
    message: '`+msg+`'
`)
	ctx := context.Background()
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	a := newOwner(t, st, set)
	subject := `a "quoted" \ subject é`
	sub := window.Subject{Action: "act", Kind: "k", Subject: subject}

	a.mustApply(b.Batch(eventsOf(subject, 2, at)...), at)
	res := a.mustApply(b.Batch(eventsOf(subject, 3, at.Add(time.Second))...), at.Add(time.Second)) // 5 of 3
	if len(res.Decisions) != 1 {
		t.Fatalf("decisions %+v, want one", res.Decisions)
	}
	first := readDeny(t, rdb, st, sub)
	if first == nil || first.Message != msg || first.Count != 5 || first.Rule != "r" || first.Limit.Count != 3 || first.Limit.Window != time.Minute {
		t.Fatalf("deny record %+v", first)
	}
	changes, err := rdb.XRange(ctx, st.Keys().Log(0), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var decided []window.DecisionMessage
	for _, m := range changes {
		c, err := window.ParseChange(m)
		if err != nil {
			t.Fatalf("change entry %v: %v", m.Values, err)
		}
		decided = append(decided, c.Decisions...)
	}
	if len(decided) != 1 || decided[0].Subject != subject || decided[0].Message != msg || !decided[0].Until.Equal(first.Until) {
		t.Fatalf("decisions in the change stream %+v, want %s's with the record's until %s", decided, subject, first.Until)
	}

	// Two more a second later: the deny is extended, not a new decision.
	res = a.mustApply(b.Batch(eventsOf(subject, 2, at.Add(2*time.Second))...), at.Add(2*time.Second))
	ext := readDeny(t, rdb, st, sub)
	if len(res.Decisions) != 0 || len(res.Extended) != 1 || !ext.Until.After(first.Until) || !ext.Since.Equal(first.Since) || ext.Count != 7 {
		t.Fatalf("extension: decisions %+v, extended %+v, record %+v (first %+v)", res.Decisions, res.Extended, ext, first)
	}
}

// Held-back states go in runs of at most the checkpoint's part size, and
// all of them are written before C moves.
func TestWriteBackWritesHeldBackStatesInParts(t *testing.T) {
	rdb, st, a := newHeldBackOwner(t, live.ApplierConfig{CheckpointPart: 3})
	ctx := context.Background()
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	const n = 8
	var first, second []eventT
	for i := range n {
		first = append(first, eventsOf("s"+strconv.Itoa(i), 6, at)...)   // near: held back (the slot holds none)
		second = append(second, eventsOf("s"+strconv.Itoa(i), 1, at)...) // 7: held back
	}
	a.mustApply(b.Batch(first...), at)
	a.mustApply(b.Batch(second...), at)
	seq := func() int64 {
		v, err := rdb.Get(ctx, st.Keys().Seq(0)).Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return v
	}
	before := seq()
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	if runs := seq() - before; runs != (n+2)/3 {
		t.Fatalf("the held-back states went in %d runs, want %d of at most 3", runs, (n+2)/3)
	}
	for i := range n {
		if l := stateLimit(t, rdb, st, "s"+strconv.Itoa(i)); l.Count != 7 {
			t.Fatalf("s%d's state after the checkpoint counts %d, want 7", i, l.Count)
		}
	}
	if d, err := rdb.Get(ctx, st.Keys().Offset("g", "wb", 0)).Int64(); err != nil || d != b.Next {
		t.Fatalf("D %d (%v), want %d", d, err, b.Next)
	}
}

// stateLimit is the one limit of the state partition 0's slot holds for
// subject (action act, kind k).
func stateLimit(t *testing.T, rdb *redis.Client, st *window.Store, subject string) window.LimitState {
	t.Helper()
	field := window.Field(window.Subject{Action: "act", Kind: "k", Subject: subject})
	js, err := rdb.HGet(context.Background(), st.Keys().State(0), field).Result()
	if err != nil {
		t.Fatalf("%s's state: %v", field, err)
	}
	s, err := window.ParseState([]byte(js))
	if err != nil || len(s.Limits) != 1 {
		t.Fatalf("%s's state %s: %v, want one limit", field, js, err)
	}
	return s.Limits[0]
}

// newHeldBackOwner is a write-back owner of partition 0 under one rule of
// 10/m on act/k: near from the 5th event, blocking from the 10th.
func newHeldBackOwner(t *testing.T, cfg live.ApplierConfig) (*redis.Client, *window.Store, *wbOwner) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, `
rules:
  - name: r
    action: act
    kinds: [k]
    limits: [10/m]
`)
	return rdb, st, newOwnerWith(t, st, set, cfg)
}

// With HoldDecisions, a verdict that only extends a deny this owner wrote
// waits for the checkpoint, D pinned before its batch: a crash before the
// checkpoint leaves the batch to be evaluated again, so the extension is
// not lost. A deny whose written retry time is near is extended at once.
func TestWriteBackHoldsDenyExtensionsUntilCheckpoint(t *testing.T) {
	rdb, st, a := newHeldBackOwner(t, live.ApplierConfig{HoldDecisions: 7 * time.Second})
	at := base.Add(time.Hour)
	sec := func(n int) time.Time { return at.Add(time.Duration(n) * time.Second) }
	b := &batcher{Topic: "wb"}
	x := window.Subject{Action: "act", Kind: "k", Subject: "x"}
	offset := func() int64 { t.Helper(); return slotOffset(t, rdb, st) }
	// record is x's deny record and state: count and until of each.
	type record struct {
		count, stateCount int64
		until, stateUntil time.Time
	}
	read := func() record {
		t.Helper()
		d := readDeny(t, rdb, st, x)
		if d == nil {
			t.Fatal("x has no deny record")
		}
		l := stateLimit(t, rdb, st, "x")
		return record{d.Count, l.Count, d.Until, l.Until}
	}
	want := func(what string, n int64, until int) {
		t.Helper()
		if got := read(); got != (record{n, n, sec(until), sec(until + 1)}) {
			t.Fatalf("%s: record and state %+v, want count %d until %s (the state's a second later)", what, got, n, sec(until))
		}
	}

	// 11 of 10/m, one a second: denied until the first leaves, +60s.
	var evs []eventT
	for i := range 11 {
		evs = append(evs, eventsOf("x", 1, sec(i))...)
	}
	first := b.Batch(evs...)
	if res := a.mustApply(first, sec(10)); !denied(res, "x") {
		t.Fatalf("11 of 10 and no deny: %+v", res)
	}
	want("the first deny", 11, 60)
	since, d0 := readDeny(t, rdb, st, x).Since, offset()
	// One more at +20s: denied until +61s, the record's +60s 40s ahead. The
	// batch writes y's first deny: D would move past it, but for x.
	second := b.Batch(append(eventsOf("x", 1, sec(20)), eventsOf("y", 11, sec(20))...)...)
	res := a.mustApply(second, sec(20))
	if denied(res, "x") || !denied(res, "y") || offset() != d0 {
		t.Fatalf("an extension was written at once: %+v, D %d (want %d)", res, offset(), d0)
	}
	want("an extension held back", 11, 60)

	// A crash now: the next owner replays the first batch and evaluates the
	// second again.
	a.resume([]batchT{first, second}, sec(21))
	want("after a crash with an extension held back", 12, 61)

	// Held again, then written by the checkpoint, with D past the batch.
	third := b.Batch(eventsOf("x", 1, sec(25))...)
	a.mustApply(third, sec(25))
	want("an extension held back by the next owner", 12, 61)
	if err := a.checkpoint(sec(26)); err != nil {
		t.Fatal(err)
	}
	want("after the checkpoint", 13, 62)
	if d := readDeny(t, rdb, st, x); !d.Since.Equal(since) {
		t.Fatalf("the extended record's since is %s, want the first deny's %s", d.Since, since)
	}
	if offset() <= third.Last {
		t.Fatalf("D %d after the checkpoint, want past %d", offset(), third.Last)
	}

	// Its written retry time 5s ahead, under the 7s asked: extended at once.
	res = a.mustApply(b.Batch(eventsOf("x", 1, sec(57))...), sec(57))
	if len(res.Extended) != 1 {
		t.Fatalf("an extension of a deny ending in 5s waited: %+v", res)
	}
	want("an extension of a deny ending soon", 14, 63)
}

// slotOffset is D, the decisions offset of topic wb's partition 0.
func slotOffset(t *testing.T, rdb *redis.Client, st *window.Store) int64 {
	t.Helper()
	v, err := rdb.Get(context.Background(), st.Keys().Offset("g", "wb", 0)).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A batch with a subject the apply script counts moves D past itself, so
// the decisions held back before it are written first.
func TestWriteBackHeldDecisionsGoBeforeAScriptBatch(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, `
rules:
  - {name: r, action: act, kinds: [k], limits: [10/m]}
  - {name: b, action: bkt, kinds: [k], limits: [1000/d], bucket: {rate: 1/s, burst: 1000}}
`)
	a := newOwnerWith(t, st, set, live.ApplierConfig{HoldDecisions: 7 * time.Second})
	at := base.Add(time.Hour)
	sec := func(n int) time.Time { return at.Add(time.Duration(n) * time.Second) }
	b := &batcher{Topic: "wb"}
	x := window.Subject{Action: "act", Kind: "k", Subject: "x"}
	var evs []eventT
	for i := range 11 {
		evs = append(evs, eventsOf("x", 1, sec(i))...)
	}
	a.mustApply(b.Batch(evs...), sec(10)) // denied until +60s
	a.mustApply(b.Batch(eventsOf("x", 1, sec(20))...), sec(20))
	if d := readDeny(t, rdb, st, x); d == nil || !d.Until.Equal(sec(60)) {
		t.Fatalf("record %+v, want the extension to +61s held back", d)
	}
	script := b.Batch(ev("bkt", "k", "z", sec(21)))
	a.mustApply(script, sec(21))
	if d := readDeny(t, rdb, st, x); d == nil || !d.Until.Equal(sec(61)) || d.Count != 12 {
		t.Fatalf("after a batch the script wrote, x's record is %+v, want count 12 until %s", d, sec(61))
	}
	if d := slotOffset(t, rdb, st); d != script.Last+1 {
		t.Fatalf("D %d, want %d", d, script.Last+1)
	}
}

// A checkpoint sets a bucket hash's expiry once per copy the owner holds,
// or for a hash of seconds it holds no copy of, once per subject and
// minute; not with every new field (a hash of seconds gets up to 60): the
// hash keeps the expiry the first write set, and every hash has one.
func TestWriteBackSetsAHashExpiryOnce(t *testing.T) {
	// With room for 4 subjects the owner keeps copies of 1 hash at most:
	// x's are dropped after each evaluation, and its room remembers.
	for name, subjects := range map[string]int{"with a copy": 1000, "without a copy": 4} {
		t.Run(name, func(t *testing.T) { testHashExpiryOnce(t, subjects) })
	}
}

func testHashExpiryOnce(t *testing.T, subjects int) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, actPerDay)
	ctx := context.Background()
	at := base.Add(time.Hour).Truncate(time.Minute)
	b := &batcher{Topic: "wb"}
	a := newOwner(t, st, set)
	a.hr = live.NewHeadroom(subjects)
	sub := window.Subject{Action: "act", Kind: "k", Subject: "x"}
	secs := st.Keys().Bucket(0, sub, 's', at)
	step := func(sec int) {
		t.Helper()
		now := at.Add(time.Duration(sec) * time.Second)
		a.mustApply(b.Batch(eventsOf("x", 2, now)...), now)
		if err := a.checkpoint(now); err != nil {
			t.Fatal(err)
		}
	}
	step(0)
	if ttl := rdb.TTL(ctx, secs).Val(); ttl <= 0 {
		t.Fatalf("seconds hash %s after its first checkpoint: TTL %s, want one", secs, ttl)
	}
	// A mark: a checkpoint that set the expiry again would overwrite it.
	const mark = 500 * time.Hour
	if err := rdb.Expire(ctx, secs, mark).Err(); err != nil {
		t.Fatal(err)
	}
	for sec := 1; sec < 5; sec++ {
		step(sec) // a new field of the same hash each time
	}
	if ttl := rdb.TTL(ctx, secs).Val(); ttl < mark-time.Minute {
		t.Fatalf("seconds hash TTL %s after later checkpoints, want the %s set between them kept", ttl, mark)
	}
	if n := rdb.HLen(ctx, secs).Val(); n != 5 {
		t.Fatalf("seconds hash holds %d fields, want 5", n)
	}

	// Another owner, which loads the hash, sets its expiry once again.
	a = newOwner(t, st, set)
	a.hr = live.NewHeadroom(subjects)
	a.resume(nil, at)
	step(5)
	if ttl := rdb.TTL(ctx, secs).Val(); ttl <= 0 || ttl > 25*time.Hour {
		t.Fatalf("seconds hash TTL %s after a new owner's checkpoint, want its own (a day and slack)", ttl)
	}
	keys, err := rdb.Keys(ctx, st.Keys().Slot(0)+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, ":@") {
			continue // the slot's own keys
		}
		if ttl := rdb.TTL(ctx, k).Val(); ttl <= 0 && ttl != -2 {
			t.Errorf("%s has no expiry (TTL %s)", k, ttl)
		}
	}
}

// A new owner reads, with a subject's bucket copies, whether the slot holds
// a state for it: a new subject far from its limits then writes nothing,
// and a state another owner wrote is still cleared once it says nothing.
func TestWriteBackLearnsWhetherTheSlotHoldsAState(t *testing.T) {
	rdb, st, a := newHeldBackOwner(t, live.ApplierConfig{})
	ctx := context.Background()
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	a.mustApply(b.Batch(eventsOf("x", 6, at)...), at) // near 10/m
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	if !rdb.HExists(ctx, st.Keys().State(0), "act:k:x").Val() {
		t.Fatal("x's state was not written")
	}

	// The next owner, two minutes on: x's one event says nothing, y is new.
	a.resume(nil, at)
	later := at.Add(2 * time.Minute)
	if res := a.mustApply(b.Batch(eventsOf("y", 1, later)...), later); !res.InMemory {
		t.Fatalf("a new subject far from its limits ran a script: %+v", res)
	}
	a.mustApply(b.Batch(eventsOf("x", 1, later)...), later)
	if rdb.HExists(ctx, st.Keys().State(0), "act:k:x").Val() {
		t.Fatal("x's state, which says nothing any more, was left in the slot")
	}
}

// An owner with nothing to checkpoint still checks, on the tick, that the
// slot is as its memory is as of: a slot Redis lost while every take was
// refused, or every subject held, is found within a tick.
func TestWriteBackIdleTickFindsALostSlot(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, actPerDay)
	at := base.Add(time.Hour)
	b := &batcher{Topic: "wb"}
	a := newOwner(t, st, set)
	a.mustApply(b.Batch(eventsOf("x", 3, at)...), at)
	if err := a.checkpoint(at); err != nil {
		t.Fatal(err)
	}
	if err := a.checkpoint(at); err != nil {
		t.Fatalf("a tick with nothing to write, the slot as it was: %v", err)
	}
	if err := stacktest.DeletePrefix(context.Background(), rdb, st.Keys().Slot(0)); err != nil {
		t.Fatal(err)
	}
	if err := a.checkpoint(at); err == nil || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("a tick with nothing to write after the slot was lost: %v, want it fenced", err)
	}
}
