package live

import (
	"context"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// A held-back deny extension (deferred.go) used to be written by the next
// checkpoint, so a subject that stayed denied had its state rewritten
// every checkpoint interval while it had events: on the bench's mix, a
// checkpoint's decide.lua runs were mostly those. A checkpoint now carries
// such a decision past it instead, while
//
//   - what the owner wrote still covers it (written.covers) at the
//     checkpoint's deadline, so the limiter keeps deciding as the
//     decision says, and
//   - the state written is younger than RefreshDecisions: what a limiter
//     reports beside the decision (retry time, counts) is that old at
//     most.
//
// The checkpoint's runs move D past the batches the decisions came from,
// so a new owner would not evaluate them again: they are first written to
// the slot as JSON (held.lua, fenced as a checkpoint is), and a new owner
// writes them as it resumes (writeInherited), each only over the very
// state the last owner wrote for its subject (decide.lua checks its
// SHA-1): one whose subject an operator unbanned or reset since, or with a
// later verdict written, is dropped. Carried decisions pin D no more; they
// stay held until a batch's verdict or a checkpoint writes them.

//go:embed held.lua
var heldBody string

var heldScript = redis.NewScript("#!lua\n" + checkpointLib + heldBody)

// keepCarried keeps the decisions carried past a checkpoint.
func keepCarried(_ string, st *deferredState) bool { return st.carried }

// carries returns what a checkpoint at second now keeps held back
// (writeDeferred's keep), nil for none.
func (s *Applier) carries(wb *writeBack, now int64) func(string, *deferredState) bool {
	if s.refresh <= 0 || s.hold <= 0 {
		return nil
	}
	deadline := now + s.hold
	return func(f string, st *deferredState) bool {
		if !st.held() || !utf8.ValidString(f) { // JSON keeps valid UTF-8 only (subjects are)
			return false
		}
		wr := wb.written[f]
		if wr == nil || now-wr.at >= s.refresh {
			return false
		}
		return wr.covers(st.verdict(), &profile{limits: st.limits}, deadline, now)
	}
}

// verdict is what covers reads of a held-back decision.
func (st *deferredState) verdict() *verdict {
	return &verdict{near: st.blocking, blocks: true, best: st.candidates()}
}

// writeCarried writes, before a checkpoint moves D, the decisions it keeps
// held back (all the held-back decisions left), and marks them carried.
// Refused, it drops hr's memory and returns errFenced.
func (s *Applier) writeCarried(ctx context.Context, group, topic string, partition int, hr *Headroom) error {
	wb := hr.wb
	n, same := 0, true
	for _, st := range wb.deferred {
		if st.held() {
			n++
			same = same && st.carried
		}
	}
	if same && n == wb.carried {
		return nil
	}
	var js []byte
	if n > 0 {
		subs := make([][]string, 0, n)
		for f, st := range wb.deferred {
			if !st.held() {
				continue
			}
			// The state this owner wrote last: the next one writes the
			// decision over it only (decide.lua, extends).
			over := ""
			if wr := wb.written[f]; wr != nil {
				over = hex.EncodeToString(wr.state[:])
			}
			subs = append(subs, argStrings(decideArgs([]any{over}, f, st.state, st.expires, st.candidates(), st.limits)))
		}
		var err error
		if js, err = json.Marshal(subs); err != nil {
			return fmt.Errorf("carry %d held-back decisions partition=%d: %w", n, partition, err)
		}
	}
	keys := []string{s.keys.Checkpoint(group, topic, partition), s.keys.Offset(group, topic, partition),
		s.keys.Seq(partition), s.keys.CheckpointHeld(group, topic, partition)}
	start := time.Now()
	out, err := heldScript.Run(ctx, s.rdb, keys, wb.expectC(), hr.seq, max(hr.next, -1), string(js)).Slice()
	s.st.Observe("checkpoint", start)
	if err != nil {
		return fmt.Errorf("carry %d held-back decisions partition=%d: %w", n, partition, err)
	}
	if replyInt(out, 0) != checkpointWritten {
		err := checkpointRefused(group, partition, out, wb.expectC(), hr)
		hr.drop()
		return fmt.Errorf("carry held-back decisions: %w", err)
	}
	for f, st := range wb.deferred {
		if st.held() && !st.carried {
			st.carried = true
			wb.deferred[f] = st
		}
	}
	wb.carried, wb.pinned = n, false
	return nil
}

// writeInherited writes the decisions the partition's last owner carried
// past its checkpoint, if hr resumed with some, each only over the state
// that owner wrote for its subject, at now, in runs of at most the
// checkpoint's part size (no run holds Redis long). Refused, it drops hr's
// memory and returns errFenced; failed, it keeps those not written for
// the next try.
func (s *Applier) writeInherited(ctx context.Context, group, topic string, partition int, hr *Headroom, now time.Time) error {
	wb := hr.wb
	if wb == nil || wb.inherited == nil {
		return nil
	}
	subs, bad := parseInherited(wb.inherited)
	if bad > 0 {
		// Not this version's, or damaged: those decisions stay in the slot
		// as last written, shorter than the last owner found them.
		s.log.Error("decisions the last owner held back past its checkpoint do not parse; dropped, the slot shows them as last written",
			"partition", partition, "checkpoint", wb.c, "dropped", bad, "kept", len(subs))
	}
	written, records := 0, 0
	for len(subs) > 0 {
		run := subs[:min(len(subs), s.part)]
		args := []any{s.keys.Slot(partition), max(hr.next, -1), max(hr.next, -1), now.UnixMilli(), s.keep, s.st.MaxLog(), hr.seq, len(run), "1"}
		for _, sub := range run {
			for _, v := range sub {
				args = append(args, v)
			}
		}
		out, err := s.runDecide(ctx, s.keys.Offset(group, topic, partition), args, hr)
		if err != nil {
			if errors.Is(err, errFenced) {
				hr.drop()
			}
			return fmt.Errorf("write the %d decisions held back past checkpoint %d partition=%d: %w", len(subs), wb.c, partition, err)
		}
		hr.seq = replyInt(out, 7)
		written, records = written+len(run), records+(len(replyInts(out[3]))+len(replyInts(out[6])))/6
		subs = subs[len(run):]
	}
	s.log.Info("wrote the decisions the last owner held back past its checkpoint", "partition", partition,
		"checkpoint", wb.c, "held", written, "records", records)
	wb.inherited = nil
	return nil
}

// parseInherited reads the carried decisions' JSON (writeCarried): per
// subject decide.lua's extend-only arguments, {state SHA-1, field, field
// as JSON, state, expiry, n candidates, then 9 values per candidate}. It
// keeps at most maxDeferred, as an owner carries, and drops any of
// another shape, which would misalign the script's reading of the rest;
// bad counts what it dropped.
func parseInherited(js []byte) (subs [][]string, bad int) {
	var all [][]string
	if err := json.Unmarshal(js, &all); err != nil {
		return nil, 1
	}
	for _, sub := range all {
		if len(subs) == maxDeferred || len(sub) < 6 {
			bad++
			continue
		}
		if n, err := strconv.Atoi(sub[5]); err != nil || n < 0 || n > 2 || len(sub) != 6+9*n {
			bad++
			continue
		}
		subs = append(subs, sub)
	}
	return subs, bad
}

// argStrings is decide.lua's arguments as strings: JSON keeps them so.
func argStrings(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = v
		case int64:
			out[i] = strconv.FormatInt(v, 10)
		case int:
			out[i] = strconv.Itoa(v)
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return out
}

// expectC is C as the checkpoint scripts compare it: ” for none stored.
func (w *writeBack) expectC() string {
	if !w.cKept {
		return ""
	}
	return strconv.FormatInt(w.c, 10)
}
