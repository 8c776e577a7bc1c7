package live_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/internal/window/windowtest"
)

// TestHeldDecisionsDecideAsWrittenAtOnce runs random bursty traffic through
// two write-back owners of one batch stream, each with its own store: one
// writes every decision at once (the owner TestAccuracyAgainstSlidingLog
// holds exact), the other holds back the verdicts that only extend a
// decision (HoldDecisions), checkpoints as the sink does (every second of
// its clock) and dies at random (memory lost, resumed from its checkpoint,
// the batches since applied again). After every batch, for every touched
// subject, what a limiter reads from either store must decide alike:
// denied or not by a deny record of the same limit, shadow-denied or not,
// blocked or not by its state's enforced and shadow limits, the held
// store's retry times never later. After every checkpoint, for every
// subject, the records and the blocking limits must be the same, retry
// times included; or, when
// the held owner carries decisions past checkpoints (RefreshDecisions),
// decide alike, each state that blocks no more than the refresh (and a few
// checkpoint intervals) older. (A state that does not block is lost with
// its owner until the subject's next event, carried or not.)
func TestHeldDecisionsDecideAsWrittenAtOnce(t *testing.T) {
	t.Run("written at checkpoints", func(t *testing.T) { heldDecisionsDecideAsWrittenAtOnce(t, 0) })
	t.Run("carried past checkpoints", func(t *testing.T) { heldDecisionsDecideAsWrittenAtOnce(t, 5*time.Second) })
}

func heldDecisionsDecideAsWrittenAtOnce(t *testing.T, refresh time.Duration) {
	rdb := stacktest.Redis(t)
	set := mustRules(t, `
rules:
  - name: acc
    action: act
    kinds: [k]
    limits: [3/s, 10/10s, 20/m, 60/5m, 150/h]
  - name: sh
    action: act
    kinds: [k]
    limits: [5/10s, 40/5m]
    shadow: true
`)
	seed := windowtest.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	zipf := rand.NewZipf(rng, 1.1, 2, 199)

	refStore, heldStore := newStore(t, rdb), newStore(t, rdb)
	// Records outlive their until by an hour: Redis expires them by its own
	// clock, and the test runs minutes of its own in a few seconds, so a
	// record written a moment before its until could go before it is read.
	keep := time.Hour
	ref := newOwnerWith(t, refStore, set, live.ApplierConfig{KeepRecords: keep})
	held := newOwnerWith(t, heldStore, set, live.ApplierConfig{HoldDecisions: 3 * time.Second, RefreshDecisions: refresh, KeepRecords: keep})
	if refresh > 0 {
		// Small runs: a new owner writes what it inherits in several, and
		// checkpoints go in parts.
		held = newOwnerWith(t, heldStore, set, live.ApplierConfig{HoldDecisions: 3 * time.Second, RefreshDecisions: refresh, KeepRecords: keep, CheckpointPart: 4})
	}
	ctx := context.Background()
	b := &batcher{Topic: "wb"}
	type appliedBatch struct {
		b   batchT
		now time.Time
	}
	var since []appliedBatch // the held owner's batches since its checkpoint
	clock := base.UnixMilli()
	lastCk := clock
	var batches, crashes, checkpoints, compared, denials, heldBack, carried int
	seen := map[string]bool{}
	for end := clock + 4*60*1000; clock < end; {
		clock += int64(rng.ExpFloat64() * 120)
		now := time.UnixMilli(clock).UTC()
		var evs []eventT
		touched := map[string]bool{}
		for range 1 + rng.IntN(6) {
			subj := "s" + strconv.FormatUint(zipf.Uint64(), 10)
			ts := clock - rng.Int64N(1500)
			if rng.Float64() < 0.03 {
				ts = clock - rng.Int64N(120_000) // late
			}
			evs = append(evs, ev("act", "k", subj, time.UnixMilli(ts).UTC()))
			touched[subj], seen[subj] = true, true
		}
		batch := b.Batch(evs...)
		ref.mustApply(batch, now)
		held.mustApply(batch, now)
		since = append(since, appliedBatch{batch, now})
		batches++
		if rng.Float64() < 0.01 {
			// SIGKILL of the held owner.
			crashes++
			held.hr = live.NewHeadroom(1000)
			next, _, err := held.ap.Resume(ctx, "g", "wb", 0, held.hr)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range since {
				if a.b.Last >= next {
					held.mustApply(consume.TrimBatch(a.b, max(next, a.b.First)), a.now)
				}
			}
		}
		for subj := range touched {
			sub := window.Subject{Action: "act", Kind: "k", Subject: subj}
			r, h := readDecision(t, rdb, refStore, sub, now), readDecision(t, rdb, heldStore, sub, now)
			if !h.decidesAs(r) {
				t.Fatalf("batch %d (%d crashes) at %s, subject %s: held back %+v, written at once %+v", batches, crashes, now, subj, h, r)
			}
			if !h.sameAfterCheckpoint(r) || h.deny.count != r.deny.count {
				heldBack++
			}
			if r.deny.live {
				denials++
			}
			compared++
		}
		if clock-lastCk >= 1000 {
			lastCk = clock
			if err := ref.checkpoint(now); err != nil {
				t.Fatal(err)
			}
			if err := held.checkpoint(now); err != nil {
				t.Fatal(err)
			}
			checkpoints++
			since = since[:0]
			// Every subject: a decision carried past a checkpoint and lost
			// would show once its written until passes, events or not.
			subs := make([]window.Subject, 0, len(seen))
			for subj := range seen {
				subs = append(subs, window.Subject{Action: "act", Kind: "k", Subject: subj})
			}
			rs, hs := readDecisions(t, rdb, refStore, subs, now), readDecisions(t, rdb, heldStore, subs, now)
			for i, r := range rs {
				h, subj := hs[i], subs[i].Subject
				switch {
				case refresh == 0 && !h.sameAfterCheckpoint(r):
					t.Fatalf("after checkpoint %d (%d crashes) at %s, subject %s: held back %+v, written at once %+v", checkpoints, crashes, now, subj, h, r)
				case refresh > 0 && (!h.decidesAs(r) || h.blocks != [2]bool{} && r.at.Sub(h.at) > refresh+3*time.Second):
					t.Fatalf("after checkpoint %d (%d crashes) at %s, subject %s: carried %+v, written at once %+v", checkpoints, crashes, now, subj, h, r)
				case !h.sameAfterCheckpoint(r):
					carried++
				}
			}
		}
	}
	t.Logf("%d batches, %d checkpoints, %d crashes; %d subject decisions compared (%d denied), %d of them with something held back; %d carried past a checkpoint",
		batches, checkpoints, crashes, compared, denials, heldBack, carried)
	if heldBack == 0 || denials == 0 || crashes == 0 || refresh > 0 && carried == 0 {
		t.Fatal("nothing was held back, carried, denied or crashed: the test proves nothing")
	}
}

// decision is what a limiter reads of a subject at one instant.
type decision struct {
	at            time.Time // its state's
	deny, shadow  recordView
	blocks        [2]bool              // enforced, shadow limits of the state
	blockingUntil map[string]time.Time // rule/limit -> until, of the limits blocking
}

type recordView struct {
	live         bool
	rule, limit  string
	count        int64
	until, since time.Time
}

func readDecision(t *testing.T, rdb *redis.Client, st *window.Store, sub window.Subject, now time.Time) decision {
	t.Helper()
	return readDecisions(t, rdb, st, []window.Subject{sub}, now)[0]
}

// readDecisions reads the decisions of subs in one round trip.
func readDecisions(t *testing.T, rdb *redis.Client, st *window.Store, subs []window.Subject, now time.Time) []decision {
	t.Helper()
	ctx := context.Background()
	p := rdb.Pipeline()
	cmds := make([][3]*redis.StringCmd, len(subs))
	for i, sub := range subs {
		cmds[i] = [3]*redis.StringCmd{p.Get(ctx, st.Keys().Deny(0, sub)), p.Get(ctx, st.Keys().Shadow(0, sub)),
			p.HGet(ctx, st.Keys().State(0), window.Field(sub))}
	}
	if _, err := p.Exec(ctx); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	out := make([]decision, len(subs))
	for i, c := range cmds {
		d := &out[i]
		d.deny, d.shadow = recordOf(t, c[0], now), recordOf(t, c[1], now)
		js, err := c[2].Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		s, err := window.ParseState([]byte(js))
		if err != nil {
			t.Fatalf("state %s: %v", js, err)
		}
		d.at = s.At
		for _, l := range s.Limits {
			if l.Until.After(now) {
				d.blocks[shadowOf(l.Rule)] = true
				if d.blockingUntil == nil {
					d.blockingUntil = map[string]time.Time{}
				}
				d.blockingUntil[l.Rule+"/"+l.Limit.String()] = l.Until
			}
		}
	}
	return out
}

func shadowOf(rule string) int {
	if rule == "sh" {
		return 1
	}
	return 0
}

func recordOf(t *testing.T, c *redis.StringCmd, now time.Time) recordView {
	t.Helper()
	v, err := c.Bytes()
	if err == redis.Nil {
		return recordView{}
	}
	if err != nil {
		t.Fatal(err)
	}
	d, err := window.ParseDeny(v)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Until.After(now) {
		return recordView{}
	}
	return recordView{live: true, rule: d.Rule, limit: d.Limit.String(), count: d.Count, until: d.Until, since: d.Since}
}

// decidesAs: the same decisions, h's retry times and counts no later.
func (h decision) decidesAs(r decision) bool {
	return h.deny.decidesAs(r.deny) && h.shadow.decidesAs(r.shadow) && h.blocks == r.blocks
}

func (h recordView) decidesAs(r recordView) bool {
	if h.live != r.live {
		return false
	}
	return !h.live || h.rule == r.rule && h.limit == r.limit && !h.until.After(r.until) && h.since.Equal(r.since)
}

// sameAfterCheckpoint: the same records and blocking limits, retry times
// included. Their counts may differ: a record written at once keeps the
// count of the first verdict that reached its until, a held one the last's.
func (h decision) sameAfterCheckpoint(r decision) bool {
	same := func(a, b recordView) bool {
		return a.live == b.live && a.rule == b.rule && a.limit == b.limit && a.until.Equal(b.until) && a.since.Equal(b.since)
	}
	if !same(h.deny, r.deny) || !same(h.shadow, r.shadow) || h.blocks != r.blocks || len(h.blockingUntil) != len(r.blockingUntil) {
		return false
	}
	for k, u := range r.blockingUntil {
		if !h.blockingUntil[k].Equal(u) {
			return false
		}
	}
	return true
}
