package live

import (
	"math"
	"runtime"

	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
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
	wb *writeBack
	// t holds a room per subject, found by its field ("action:kind:subject",
	// window.Field), and the subjects' bucket copies: outside the Go heap
	// (subjects.go). A room is dropped only with all others, so a *room
	// stays valid until the next evict.
	t   *tables
	max int
	// held: the slot held the partition's offset since this Headroom was
	// made or last recounted (a resume found it, a batch was applied).
	// Finding it missing then means Redis lost the slot; drop keeps it.
	held bool
	key  []byte // scratch of roomOf
	plan []byte // scratch of needs
}

// room is 36 bytes: this is the memory a write-back owner keeps of every
// resident subject, so it holds 32-bit values clamped on the safe side.
type room struct {
	// left, per limit then bucket: events that may still be added before
	// its threshold (negative: unknown, evaluate). Limits past the last
	// slot share it and it holds the least of theirs: a headroom can only
	// be lowered safely (a lower one costs an evaluation, never skips one),
	// so values above math.MaxInt32 are stored as math.MaxInt32.
	left [roomSlots]int32
	at   uint32 // second it was last evaluated at (clamped up; see needs)
	// copies is the first block of the subject's bucket copies, plus one
	// (0: none); pruned the minute they were last pruned at.
	copies uint32
	pruned uint32
	n      uint16 // limits and buckets it was evaluated with
	// stated: whether the slot holds a state for it, as last written
	// (write-back skips the script for a subject with none, near no limit)
	stated byte
	// expMinute: the minute whose hash of seconds a checkpoint of this
	// owner set the expiry of, for a subject it holds no copy of (ckptTTL);
	// 0 for none. Rooms are dropped with everything that could have
	// removed the hash: other rules, a fence refused, an eviction.
	expMinute uint32
}

const roomSlots = 4

// slot is the slot of room.left that limit i's headroom is kept in.
func slot(i int) int { return min(i, roomSlots-1) }

const (
	statedUnknown byte = iota
	statedNone
	statedSome
	statedBlocks // a state saying one more event does not fit
)

// notEvaluated is the apply script's headroom of a limit it was told not
// to evaluate.
const notEvaluated = 1_000_000_000_000_000

// Evaluation plans of needs, as the apply script reads them.
const (
	evalNone = ""
	evalAll  = "*"
)

// NewHeadroom remembers about maxSubjects subjects (forgetting all when a
// batch would take it past that: they are evaluated again once, which
// costs one evaluation each), and copies of at most maxSubjects/4 bucket
// hashes (mirror.go: a subject's copy holds one to six hashes of 256
// bytes). Its tables live outside the Go heap and are returned to the
// kernel once h is collected.
func NewHeadroom(maxSubjects int) *Headroom {
	n := min(max(maxSubjects, 1), math.MaxInt32/2) // rooms are indexed by int32, with a batch's room over max
	t := newTables()
	h := &Headroom{next: -2, seq: -2, t: t, mir: newMirror(t, n/4), max: n}
	runtime.AddCleanup(h, func(t *tables) { t.free() }, t)
	return h
}

// expect is the offset the store should hold if no one else wrote.
func (h *Headroom) expect() int64 {
	if h == nil {
		return -2
	}
	return h.next
}

// use forgets everything learnt under other rules, and makes room for a
// batch of n subjects: when they could take it past its bound, it forgets
// every subject first. Rooms are only ever dropped here, between batches
// (and by forget, when a batch fails), so that no batch loses the copies
// it has loaded.
func (h *Headroom) use(set *rules.Set, n int) {
	if h == nil {
		return
	}
	if h.rs != set {
		h.forget()
		h.rs = set
	}
	if h.t.rooms.len()+n > h.max {
		h.evict()
	}
}

// evict forgets every subject's room and copies, not the offsets they
// were learnt at: what a subject lacks is learnt again.
func (h *Headroom) evict() {
	h.t.reset()
	h.mir.forget()
}

// stored records the offset the store holds after an Apply.
func (h *Headroom) stored(next int64) {
	if h != nil {
		h.next = next
	}
}

func (h *Headroom) forget() {
	if h != nil {
		h.evict()
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
	h.t.pending.reset()
	h.next, h.seq = -2, -2
	h.forget()
}

// roomOf returns sub's room, or nil.
func (h *Headroom) roomOf(sub window.Subject) *room {
	h.key = fieldKey(h.key, sub)
	return h.t.rooms.get(h.key)
}

// roomFor returns sub's room, adding one that knows nothing yet (nil when
// the subject cannot be held).
func (h *Headroom) roomFor(sub window.Subject, n int) *room {
	h.key = fieldKey(h.key, sub)
	r, added := h.t.rooms.add(h.key)
	if added {
		r.left, r.n = unknownRoom(n).left, uint16(n)
	}
	return r
}

// setVerdict records a verdict evaluated from the copies: its headroom,
// and whether the subject's state says anything now.
func (h *Headroom) setVerdict(ps *pendingSubject) {
	h.set(ps.sub, ps.verdict.h, ps.eval)
	if ps.deferred {
		return // the slot holds what it held
	}
	if r := h.roomOf(ps.sub); r != nil {
		r.stated = stated(ps.verdict)
	}
}

// stated is what the slot holds for a subject once v's state is written.
func stated(v *verdict) byte {
	switch {
	case v.state == "":
		return statedNone
	case v.blocks:
		return statedBlocks
	}
	return statedSome
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
	r := h.roomOf(sub)
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
	r := h.roomOf(sub)
	// An evaluation second before the remembered one (an event ahead of the
	// clock was evaluated at its own second) could see events the later one
	// did not: evaluate. A second past what room.at holds may be before the
	// one it was clamped from: evaluate too.
	if r == nil || int(r.n) != n || eval < int64(r.at) || eval > now || eval >= math.MaxUint32 || added < 0 {
		return evalAll
	}
	var near [roomSlots]bool
	for s := range min(n, roomSlots) {
		near[s] = added >= int64(r.left[s])
	}
	h.plan = h.plan[:0]
	some, all := false, true
	for i := range n {
		if near[slot(i)] {
			h.plan = append(h.plan, '1')
			some = true
			continue
		}
		h.plan = append(h.plan, '0')
		all = false
	}
	if all {
		return evalAll
	}
	for s := range min(n, roomSlots) {
		if !near[s] {
			r.left[s] -= int32(added) // added < left <= math.MaxInt32
		}
	}
	if !some {
		return evalNone
	}
	return string(h.plan)
}

// set records the headroom the script found for each evaluated limit
// (notEvaluated for those it left out, whose headroom needs kept).
func (h *Headroom) set(sub window.Subject, left []int64, at int64) {
	if h == nil || len(left) > math.MaxUint16 {
		return // a subject with that many limits is evaluated every time
	}
	r := h.roomFor(sub, len(left))
	if r == nil {
		return
	}
	if int(r.n) != len(left) {
		r.left, r.n, r.at, r.stated = unknownRoom(len(left)).left, uint16(len(left)), 0, statedUnknown
	}
	fold := int64(math.MaxInt64) // the least headroom of the limits sharing the last slot
	for i, l := range left {
		s := slot(i)
		if l == notEvaluated {
			if s < roomSlots-1 {
				continue
			}
			l = int64(r.left[s]) // its shrunk headroom: still a bound below its own
		}
		if s < roomSlots-1 {
			r.left[s] = clampLeft(l)
			continue
		}
		fold = min(fold, l)
	}
	if len(left) >= roomSlots {
		r.left[roomSlots-1] = clampLeft(fold)
	}
	r.at = max(r.at, clampAt(at))
}

// unknownRoom is the room of a subject not evaluated with n limits yet.
func unknownRoom(n int) room {
	r := room{n: uint16(n)}
	for s := range r.left {
		r.left[s] = -1 // unknown: evaluate
	}
	return r
}

// clampLeft stores a headroom in 32 bits: lowered, never raised, for a
// positive one; any negative one means evaluate (batches add events).
func clampLeft(l int64) int32 {
	switch {
	case l < 0:
		return -1
	case l > math.MaxInt32:
		return math.MaxInt32
	}
	return int32(l)
}

// clampAt stores a second in 32 bits: raised before 1970 (an earlier
// evaluation then evaluates again), lowered past 2106 (needs evaluates
// any second that late).
func clampAt(at int64) uint32 {
	return uint32(min(max(at, 0), math.MaxUint32))
}

// Residency is what a Headroom holds in memory.
type Residency struct {
	Subjects int // subjects whose headroom it remembers
	Copies   int // bucket hashes copied (mirror.go)
	Pending  int // write-back bucket fields not checkpointed yet
	OffHeap  int // bytes of its tables outside the Go heap (mapped, not all touched)
}

// Resident reports what h holds (a benchmark of its memory reads it).
func (h *Headroom) Resident() Residency {
	r := Residency{Subjects: h.t.rooms.len(), Copies: h.mir.hashes, OffHeap: h.t.bytes()}
	if h.wb != nil {
		r.Pending = h.wb.fields
	}
	return r
}
