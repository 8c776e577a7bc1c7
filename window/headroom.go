package window

import "floodgate/rules"

// Headroom remembers, for one partition, how far each subject stood from
// the nearest near threshold of its limits (half the limit) when last
// evaluated. A window's count can only grow by the events added to it, so a
// batch adding fewer events than a subject's headroom cannot have brought it
// near any limit: Apply then counts it without evaluating it, the costliest
// part of a batch (window sums read every bucket level). Subjects near a
// limit have no headroom and are evaluated on every batch that touches them.
//
// What it remembers holds while this process is the partition's only
// writer: the apply script evaluates everything when the stored offset is
// not the one the Headroom last saw (another owner wrote), and a rules
// change, a trimmed batch or a failed run forgets everything. Not safe for
// concurrent use; the zero value is not usable (NewHeadroom).
type Headroom struct {
	rs   *rules.Set
	next int64 // the partition's next offset after the last Apply; -2 unknown
	subs map[Subject]room
	max  int
}

type room struct {
	left int64 // events that may still be added before a threshold is reached
	at   int64 // second it was evaluated at
}

// NewHeadroom remembers at most maxSubjects subjects (forgetting all when
// full: they are evaluated again once, which costs one evaluation each).
func NewHeadroom(maxSubjects int) *Headroom {
	return &Headroom{next: -2, subs: map[Subject]room{}, max: max(maxSubjects, 1)}
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
		h.next = -2
	}
}

// needs reports whether sub, adding added events with its evaluation at
// second eval, must be evaluated; when not, its headroom shrinks by added.
func (h *Headroom) needs(sub Subject, added, eval, now int64) bool {
	if h == nil {
		return true
	}
	r, ok := h.subs[sub]
	// An evaluation second before the remembered one (an event ahead of the
	// clock was evaluated at its own second) could see events the later one
	// did not: evaluate.
	if !ok || added >= r.left || eval < r.at || eval > now {
		return true
	}
	r.left -= added
	h.subs[sub] = r
	return false
}

func (h *Headroom) set(sub Subject, left, at int64) {
	if h == nil {
		return
	}
	if len(h.subs) >= h.max {
		clear(h.subs)
	}
	h.subs[sub] = room{left: left, at: at}
}
