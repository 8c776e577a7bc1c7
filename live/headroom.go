package live

import (
	"floodgate/rules"
	"floodgate/window"
)

// Headroom remembers, for one partition, how far each subject stood from
// the near threshold (half the limit) of each of its limits and buckets
// when last evaluated. A window's count can only grow by the events added
// to it, so a batch adding fewer events than a limit's headroom cannot have
// brought the subject near that limit: Apply then counts the events without
// evaluating the limit, the costliest part of a batch (a window sum reads
// every bucket level the window spans). Limits a subject is near have no
// headroom and are evaluated on every batch that touches it; its far ones
// (a day's limit when only the second's is near) are not.
//
// What it remembers holds while this process is the partition's only
// writer: the apply script evaluates everything when the stored offset is
// not the one the Headroom last saw (another owner wrote), and a rules
// change, a trimmed batch or a failed run forgets everything. It also holds
// the partition's copies of the buckets of subjects it evaluates (mirror.go),
// under the same rule. Not safe for
// concurrent use; the zero value is not usable (NewHeadroom).
type Headroom struct {
	rs   *rules.Set
	next int64 // the partition's next offset after the last Apply; -2 unknown
	seq  int64 // the slot's change sequence after the last Apply; -2 unknown
	mir  *mirror
	// wb is a write-back owner's memory (writeback.go): the increments not
	// checkpointed yet. forget leaves it; only drop (a rewind) loses it.
	wb   *writeBack
	subs map[window.Subject]*room
	max  int
	plan []byte // scratch of needs
}

type room struct {
	left []int64 // per limit, then bucket: events that may still be added before its threshold
	at   int64   // second it was last evaluated at
	// stated: whether the slot holds a state for it, as last written
	// (write-back skips the script for a subject with none, near no limit)
	stated byte
}

const (
	statedUnknown byte = iota
	statedNone
	statedSome
)

// notEvaluated is the apply script's headroom of a limit it was told not
// to evaluate.
const notEvaluated = 1_000_000_000_000_000

// Evaluation plans of needs, as the apply script reads them.
const (
	evalNone = ""
	evalAll  = "*"
)

// NewHeadroom remembers at most maxSubjects subjects (forgetting all when
// full: they are evaluated again once, which costs one evaluation each),
// and copies of at most maxSubjects/4 bucket hashes (mirror.go: a
// subject's copy holds one to six hashes of about 600 bytes each).
func NewHeadroom(maxSubjects int) *Headroom {
	n := max(maxSubjects, 1)
	return &Headroom{next: -2, seq: -2, mir: newMirror(n / 4), subs: map[window.Subject]*room{}, max: n}
}

// expect is the offset the store should hold if no one else wrote.
func (h *Headroom) expect() int64 {
	if h == nil {
		return -2
	}
	return h.next
}

// use forgets everything learnt under other rules.
func (h *Headroom) use(set *rules.Set) {
	if h != nil && h.rs != set {
		h.forget()
		h.rs = set
	}
}

// stored records the offset the store holds after an Apply.
func (h *Headroom) stored(next int64) {
	if h != nil {
		h.next = next
	}
}

func (h *Headroom) forget() {
	if h != nil {
		clear(h.subs)
		h.mir.forget()
		if h.wb == nil {
			h.next, h.seq = -2, -2
		}
		// A write-back owner keeps the offset and sequence it fences on: its
		// memory is as of them still.
	}
}

// drop forgets everything, write-back memory included.
func (h *Headroom) drop() {
	h.wb = nil
	h.next, h.seq = -2, -2
	h.forget()
}

// setVerdict records a verdict evaluated from the copies: its headroom,
// and whether the subject's state says anything now.
func (h *Headroom) setVerdict(ps *pendingSubject) {
	h.set(ps.sub, ps.verdict.h, ps.eval)
	if r := h.subs[ps.sub]; r != nil {
		r.stated = statedNone
		if ps.verdict.state != "" {
			r.stated = statedSome
		}
	}
}

// learnVerdicts records the verdicts of a batch that wrote nothing.
func (h *Headroom) learnVerdicts(order []*pendingSubject) (evaluated, mirrored int) {
	for _, ps := range order {
		if ps.verdict != nil {
			h.setVerdict(ps)
			evaluated++
			mirrored++
		}
	}
	return evaluated, mirrored
}

// quiet tells whether a verdict of sub writes nothing: no deny, no state,
// and none in the slot as last written.
func (h *Headroom) quiet(sub window.Subject, v *verdict) bool {
	if v.best[0] != nil || v.best[1] != nil || v.state != "" {
		return false
	}
	r := h.subs[sub]
	return r != nil && r.stated == statedNone
}

// needs returns which of sub's n limits (windows, then buckets) must be
// evaluated when a batch adds added events with its evaluation at second
// eval: evalAll, evalNone, or one '0'/'1' per limit. The headroom of each
// limit left out shrinks by added.
func (h *Headroom) needs(sub window.Subject, n int, added, eval, now int64) string {
	if h == nil {
		return evalAll
	}
	r, ok := h.subs[sub]
	// An evaluation second before the remembered one (an event ahead of the
	// clock was evaluated at its own second) could see events the later one
	// did not: evaluate.
	if !ok || len(r.left) != n || eval < r.at || eval > now {
		return evalAll
	}
	h.plan = h.plan[:0]
	some, all := false, true
	for i, left := range r.left {
		if added >= left {
			h.plan = append(h.plan, '1')
			some = true
			continue
		}
		h.plan = append(h.plan, '0')
		all = false
		r.left[i] = left - added
	}
	switch {
	case all:
		return evalAll
	case !some:
		return evalNone
	}
	return string(h.plan)
}

// set records the headroom the script found for each evaluated limit
// (notEvaluated for those it left out, whose headroom needs kept).
func (h *Headroom) set(sub window.Subject, left []int64, at int64) {
	if h == nil {
		return
	}
	r, ok := h.subs[sub]
	if !ok || len(r.left) != len(left) {
		if len(h.subs) >= h.max {
			clear(h.subs)
		}
		r = &room{left: make([]int64, len(left))}
		for i := range r.left {
			r.left[i] = -1 // unknown: evaluate
		}
		h.subs[sub] = r
	}
	for i, l := range left {
		if l != notEvaluated {
			r.left[i] = l
		}
	}
	r.at = max(r.at, at)
}

// Residency is what a Headroom holds in memory.
type Residency struct {
	Subjects int // subjects whose headroom it remembers
	Copies   int // bucket hashes copied (mirror.go)
	Pending  int // write-back bucket fields not checkpointed yet
}

// Resident reports what h holds (a benchmark of its memory reads it).
func (h *Headroom) Resident() Residency {
	r := Residency{Subjects: len(h.subs), Copies: h.mir.hashes}
	if h.wb != nil {
		r.Pending = h.wb.fields
	}
	return r
}
