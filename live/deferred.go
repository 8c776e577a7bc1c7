package live

import (
	"context"
	"errors"
	"fmt"
	"time"

	"floodgate/window"
)

// A near subject's state changes with every event counted, and most of
// those changes move only what the limiter reports as its Count and
// Remaining: the decision — one more fits, or not until a time — stays.
// Writing each costs Redis a script's share (decide.lua: the state's field,
// its expiry entry and its change entry). So a write-back owner writes a
// verdict at once when it carries a decision: a deny or shadow record, a
// state that blocks, or a slot whose state blocks or is unknown. It holds
// back a state that does not block, over one that did not either — the
// latest of each subject — and writes them before its next checkpoint. A
// limiter's Count and Remaining for a subject that has room left are then
// as of its last decision or checkpoint, up to the checkpoint interval old;
// its allow, its deny and its retry time are not. An owner that dies
// before the checkpoint loses them: the states say the counts of the last
// write until the subject's next event.

// maxDeferred bounds the states one partition holds back: past it, a state
// is written at once, as a write-through owner writes it.
const maxDeferred = 2048

type deferredState struct {
	state   string
	expires int64
}

// deferState holds v's state back until the checkpoint when it changes no
// decision (see above), and tells whether it did.
func (w *writeBack) deferState(hr *Headroom, sub window.Subject, v *verdict) bool {
	if v.best != [2]*candidate{} || v.state == "" || v.blocks {
		return false
	}
	if r := hr.roomOf(sub); r == nil || (r.stated != statedNone && r.stated != statedSome) {
		return false
	}
	f := window.Field(sub)
	if _, ok := w.deferred[f]; !ok && len(w.deferred) >= maxDeferred {
		return false
	}
	if w.deferred == nil {
		w.deferred = map[string]deferredState{}
	}
	w.deferred[f] = deferredState{v.state, v.expires}
	return true
}

// undefer forgets sub's state held back: a later verdict supersedes it.
func (w *writeBack) undefer(sub window.Subject) {
	if len(w.deferred) > 0 {
		delete(w.deferred, window.Field(sub))
	}
}

// writeDeferred writes the states held back, and moves D up to memory's
// position: every verdict before it is then written (a batch that ran no
// script had nothing else to write). It writes them in runs of at most
// the checkpoint's part size, so that no run holds Redis long; each run
// moves D there. Refused, it drops hr's memory and returns errFenced;
// failed, it keeps the states not written for the next checkpoint.
func (s *Applier) writeDeferred(ctx context.Context, group, topic string, partition int, hr *Headroom, now time.Time) error {
	wb := hr.wb
	d := max(hr.next, wb.at)
	run := make([]string, 0, min(len(wb.deferred), s.part))
	for len(wb.deferred) > 0 {
		run = run[:0]
		for f := range wb.deferred {
			if len(run) == cap(run) {
				break
			}
			run = append(run, f)
		}
		if err := s.writeStates(ctx, group, topic, partition, hr, d, run, now); err != nil {
			return err
		}
	}
	return nil
}

// writeStates writes the held-back states of the fields in run with
// decide.lua, moving D to d, and forgets them.
func (s *Applier) writeStates(ctx context.Context, group, topic string, partition int, hr *Headroom, d int64, run []string, now time.Time) error {
	wb := hr.wb
	args := make([]any, 0, 8+5*len(run))
	args = append(args, s.keys.Slot(partition), hr.next, d, now.UnixMilli(), s.keep, s.st.MaxLog(), hr.seq, len(run))
	for _, f := range run {
		st := wb.deferred[f]
		args = append(args, f, jsonString(f), st.state, st.expires, 0)
	}
	out, err := s.runDecide(ctx, s.keys.Offset(group, topic, partition), args, hr)
	if err != nil {
		if errors.Is(err, errFenced) {
			hr.drop()
		}
		return fmt.Errorf("write %d held-back states partition=%d: %w", len(run), partition, err)
	}
	for _, f := range run {
		hr.key = append(hr.key[:0], f...) // the rooms' key: fieldKey
		if r := hr.t.rooms.get(hr.key); r != nil {
			r.stated = statedSome
		}
		delete(wb.deferred, f)
	}
	hr.next, hr.seq = d, replyInt(out, 7)
	return nil
}
