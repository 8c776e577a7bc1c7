package live

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/internal/window"
)

// A near subject's state changes with every event counted, and most of
// those changes move only what the limiter reports as its Count and
// Remaining, or how long a subject it denies waits: the decision — one more
// fits, or not — stays. Writing each costs Redis a script's share
// (decide.lua: the state's field, its expiry entry, its change entry, a
// deny record's extension). So a write-back owner holds back, until its
// next checkpoint, the latest verdict of a subject when it changes no
// decision:
//
//   - a state that does not block, over one that did not either: it moves
//     only Count and Remaining;
//   - with HoldDecisions set, a state that blocks where the state it wrote
//     blocks until at least HoldDecisions ahead (written.covers), with its
//     deny and shadow records the ones it wrote extended (same limit,
//     later until): the limiter decides as it would with the new verdict
//     until the checkpoint writes it, and tells earlier retry times, older
//     counts, and not yet a limit newly exceeded beside one that denies.
//
// Everything else is written at once: a new deny or shadow record, a
// subject newly denied or no longer, a slot whose state is unknown
// (evicted rooms, a subject whose writes this owner does not remember),
// and any verdict of a batch apply.lua writes (it moves D). A held-back
// decision pins the decisions offset D at the batch it came from, so that
// an owner that dies before its checkpoint leaves it to the next owner to
// evaluate again, and a checkpoint may carry it further (carried.go); a
// held-back count-only state does not, and is lost with the owner (the
// counts of the last write stand until the subject's next event).

// maxDeferred bounds the verdicts one partition holds back, and maxWritten
// the blocked subjects whose written decisions it remembers: past them, a
// verdict is written at once, as a write-through owner writes it.
const (
	maxDeferred = 2048
	maxWritten  = 4096
)

type deferredState struct {
	state   string
	expires int64
	// A held-back decision's: its records' candidates (l 0: none), the
	// profile's limits they name, and the limits its state blocks.
	best     [2]candidate
	limits   []profileLimit
	blocking []nearLimit
	// carried: the slot holds it for a new owner to write (carried.go)
	carried bool
	at      int64 // the second it was evaluated at
}

// held tells whether st is a decision held back (else a state that only
// moves counts).
func (st *deferredState) held() bool { return len(st.blocking) > 0 }

// candidates are st's record candidates as a verdict holds them (nil:
// none), pointing into st.
func (st *deferredState) candidates() [2]*candidate {
	var best [2]*candidate
	for k := range st.best {
		if st.best[k].l != 0 {
			best[k] = &st.best[k]
		}
	}
	return best
}

// written is what this owner last wrote for a subject whose state blocks:
// the limits it blocks and until when, its deny and shadow records, the
// second the verdict written was evaluated at, and the state's SHA-1 (a
// new owner writes a carried decision only over that state: carried.go).
type written struct {
	blocking []nearLimit // l, until (s)
	records  [2]writtenRecord
	at       int64
	state    [sha1.Size]byte
}

type writtenRecord struct{ l, untilMS int64 } // l 0: none known

// holdAt says whether a batch's verdicts, evaluated at second now, may
// hold decisions back: deadline is the second a retry time written must
// reach (0: none held), from is the batch's first offset.
type holdAt struct{ deadline, now, from int64 }

// deferState holds v's state back until the checkpoint when it changes no
// decision (see above), and tells whether it did.
func (w *writeBack) deferState(hr *Headroom, sub window.Subject, v *verdict, pr *profile, h holdAt) bool {
	if v.state == "" {
		return false
	}
	r := hr.roomOf(sub) // hr.key: its field, looked up without a string
	if r == nil {
		return false
	}
	held := false
	switch {
	case v.best == [2]*candidate{} && !v.blocks && (r.stated == statedNone || r.stated == statedSome):
	case h.deadline > 0 && v.blocks && r.stated == statedBlocks && w.written[string(hr.key)].covers(v, pr, h.deadline, h.now):
		held = true
	default:
		return false
	}
	if _, ok := w.deferred[string(hr.key)]; !ok && len(w.deferred) >= maxDeferred {
		return false
	}
	if w.deferred == nil {
		w.deferred = map[string]deferredState{}
	}
	d := deferredState{state: v.state, expires: v.expires, at: h.now}
	if held {
		d.best, d.limits, d.blocking = candidates(v.best), pr.limits, blockingOf(v.near)
		if !w.pinned {
			w.pinned, w.heldFrom = true, h.from
		}
	}
	w.deferred[string(hr.key)] = d
	return true
}

// covers tells whether v denies as wr does until deadline: each class of
// limits v blocks (enforced, shadow) has a limit wr blocks until deadline
// at least, which v blocks as long; every limit wr blocks that has not
// ended v blocks too, none earlier; and each record v has extends the one
// written (same limit, later until, that until deadline at least). What
// differs is then what the limiter reports beside its decision: counts,
// retry times, a limit newly exceeded beside one that denies already.
func (wr *written) covers(v *verdict, pr *profile, deadline, now int64) bool {
	if wr == nil {
		return false
	}
	var need, anchored [2]bool
	for _, nr := range v.near {
		if nr.until == 0 {
			continue
		}
		need[shadowIx(pr, nr.l)] = true
		if u := wr.until(nr.l); nr.until < u {
			return false
		}
	}
	for _, b := range wr.blocking {
		u := untilOf(v.near, b.l)
		if b.until > now && u == 0 {
			return false
		}
		if b.until >= deadline && u >= b.until {
			anchored[shadowIx(pr, b.l)] = true
		}
	}
	if need[0] && !anchored[0] || need[1] && !anchored[1] {
		return false
	}
	for k, c := range v.best {
		if c == nil {
			continue
		}
		if rec := wr.records[k]; rec.l != c.l || rec.untilMS < deadline*1000 || c.untilMS < rec.untilMS {
			return false
		}
	}
	return true
}

// shadowIx is 1 for a limit of a shadow rule, else 0.
func shadowIx(pr *profile, l int64) int {
	if l >= 1 && l <= int64(len(pr.limits)) && pr.limits[l-1].rule.Shadow {
		return 1
	}
	return 0
}

func untilOf(near []nearLimit, l int64) int64 {
	for _, nr := range near {
		if nr.l == l {
			return nr.until
		}
	}
	return 0
}

func (wr *written) until(l int64) int64 {
	for _, b := range wr.blocking {
		if b.l == l {
			return b.until
		}
	}
	return 0
}

// wrote remembers what a verdict's write left in the slot for field f: the
// limits its state blocks, and the records decide.lua wrote (wroteK) or
// left as they were (a candidate not written: the slot holds a record this
// owner does not know).
func (w *writeBack) wrote(f string, blocking []nearLimit, best [2]candidate, wroteK [2]bool, at int64, state string) {
	wr := w.written[f]
	if len(blocking) == 0 {
		if wr != nil {
			delete(w.written, f)
		}
		return
	}
	if wr == nil {
		if len(w.written) >= maxWritten {
			return
		}
		if w.written == nil {
			w.written = map[string]*written{}
		}
		wr = &written{}
		w.written[f] = wr
	}
	wr.blocking, wr.at, wr.state = blocking, at, sha1.Sum([]byte(state))
	for k, c := range best {
		switch {
		case wroteK[k]:
			wr.records[k] = writtenRecord{c.l, c.untilMS}
		case c.l != 0:
			wr.records[k] = writtenRecord{}
		}
	}
}

// pruneWritten forgets the written decisions that have all ended by second
// now, once they fill half the bound.
func (w *writeBack) pruneWritten(now int64) {
	if len(w.written) < maxWritten/2 {
		return
	}
	for f, wr := range w.written {
		end := int64(0)
		for _, b := range wr.blocking {
			end = max(end, b.until)
		}
		for _, rec := range wr.records {
			end = max(end, rec.untilMS/1000+1)
		}
		if end <= now {
			delete(w.written, f)
		}
	}
}

// candidates copies a verdict's candidates (l 0: none).
func candidates(best [2]*candidate) [2]candidate {
	var out [2]candidate
	for k, c := range best {
		if c != nil {
			out[k] = *c
		}
	}
	return out
}

// blockingOf returns the near limits that block.
func blockingOf(near []nearLimit) []nearLimit {
	var out []nearLimit
	for _, nr := range near {
		if nr.until != 0 {
			out = append(out, nearLimit{l: nr.l, until: nr.until})
		}
	}
	return out
}

// undefer forgets sub's state held back: a later verdict supersedes it.
func (w *writeBack) undefer(hr *Headroom, sub window.Subject) {
	if len(w.deferred) > 0 {
		hr.key = fieldKey(hr.key, sub)
		delete(w.deferred, string(hr.key))
	}
}

// writeDeferred writes the verdicts held back but those keep keeps (nil:
// none), in runs of at most the checkpoint's part size, so that no run
// holds Redis long. With moveD, the last run moves D up to memory's
// position: every verdict before it is then written (a batch that ran no
// script had nothing else to write), but those carried past a checkpoint
// (carried.go), which do not depend on D. Refused, it drops hr's memory
// and returns errFenced; failed, it keeps the verdicts not written for the
// next checkpoint.
func (s *Applier) writeDeferred(ctx context.Context, group, topic string, partition int, hr *Headroom, now time.Time, keep func(f string, st *deferredState) bool, moveD bool) error {
	wb := hr.wb
	todo := make([]string, 0, len(wb.deferred))
	for f, st := range wb.deferred {
		if keep == nil || !keep(f, &st) {
			todo = append(todo, f)
		}
	}
	for i := 0; i < len(todo); i += s.part {
		run := todo[i:min(i+s.part, len(todo))]
		d := hr.next
		if moveD && i+len(run) == len(todo) {
			d = max(hr.next, wb.at)
		}
		if err := s.writeStates(ctx, group, topic, partition, hr, d, run, now); err != nil {
			return err
		}
	}
	wb.pinned = false
	for _, st := range wb.deferred {
		wb.pinned = wb.pinned || st.held() && !st.carried
	}
	return nil
}

// writeStates writes the held-back verdicts of the fields in run with
// decide.lua, moving D to d, and forgets them.
func (s *Applier) writeStates(ctx context.Context, group, topic string, partition int, hr *Headroom, d int64, run []string, now time.Time) error {
	wb := hr.wb
	args := make([]any, 0, 8+5*len(run))
	args = append(args, s.keys.Slot(partition), hr.next, d, now.UnixMilli(), s.keep, s.st.MaxLog(), hr.seq, len(run), "0")
	for _, f := range run {
		st := wb.deferred[f]
		args = decideArgs(args, f, st.state, st.expires, st.candidates(), st.limits)
	}
	out, err := s.runDecide(ctx, s.keys.Offset(group, topic, partition), args, hr)
	if err != nil {
		if errors.Is(err, errFenced) {
			hr.drop()
		}
		return fmt.Errorf("write %d held-back verdicts partition=%d: %w", len(run), partition, err)
	}
	wroteK := recordsWritten(out, len(run))
	if decs := replyInts(out[3]); len(decs) > 0 {
		// Held back as extensions of the records written, taken by the
		// script as new decisions (published by the relay all the same): the
		// slot's records changed under this owner, or the checkpoint came
		// later than the retry times written.
		s.log.Warn("held-back deny extensions written as new decisions", "partition", partition, "records", len(decs)/6)
	}
	for i, f := range run {
		st := wb.deferred[f]
		hr.key = append(hr.key[:0], f...) // the rooms' key: fieldKey
		if r := hr.t.rooms.get(hr.key); r != nil {
			r.stated = statedSome
			if len(st.blocking) > 0 {
				r.stated = statedBlocks
			}
		}
		if s.hold > 0 {
			wb.wrote(f, st.blocking, st.best, wroteK[i], st.at, st.state)
		}
		delete(wb.deferred, f)
	}
	hr.next, hr.seq = d, replyInt(out, 7)
	return nil
}

// recordsWritten reads decide.lua's reply: of each of n subjects, whether
// its deny and its shadow record were written, new or extended.
func recordsWritten(out []any, n int) [][2]bool {
	w := make([][2]bool, n)
	for _, ix := range []int{3, 6} {
		flat := replyInts(out[ix])
		for i := 0; i+5 < len(flat); i += 6 {
			if s := flat[i] - 1; s >= 0 && s < int64(n) {
				w[s][min(max(flat[i+4], 0), 1)] = true
			}
		}
	}
	return w
}
