package live

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// mirror keeps, for one partition, copies of the bucket hashes of the
// subjects its batches evaluate, so that Apply evaluates their window
// limits in Go and the apply script only writes. Evaluating in Lua was the
// costliest part of a batch in Redis (docs/redis.md): every evaluation
// loaded and parsed several hashes (HGETALL) and walked them to find when a
// deny ends, batch after batch for the same hot subjects.
//
// A copy is exact because this process is the only writer of its
// partition's counters while it holds the partition: the apply script
// refuses Go's verdicts (STALE, nothing written) unless the stored offset
// is the one this process last stored and the slot's change sequence is the
// one it last saw (an operator's reset bumps it). Subjects with strict rules
// (a take writes their buckets too), distinct limits or token buckets are
// left to the script. A hash the copy does not hold is loaded from Redis
// before the batch's increments; a hash it holds gets them as they are
// applied. Anything unexpected forgets the copy (Headroom.forget): it is
// loaded again, which costs a round trip, never a wrong count.
//
// Memory is bounded by hashes, not subjects (a subject with a day's window
// holds about six, one with a minute's one or two): past maxHashes, a
// quarter of the copies are dropped, from a random subject on. Each hash is
// a block of 16-bit counts outside the Go heap, chained from the subject's
// room: most subjects count a few events a second. A hash whose counts
// outgrow 16 bits (a hot subject's minutes, an event carrying up to a
// million) keeps them in a wide copy on the heap instead, 64 bits each;
// there are at most as many as blocks.
type mirror struct {
	t         *tables
	free      uint32 // first free block, plus one
	wide      map[uint32]*[60]int64
	hashes    int // held by all subjects
	maxHashes int
}

// block is one bucket hash of one subject: 136 bytes.
type block struct {
	n     int64  // hash number (hashID.n)
	next  uint32 // the subject's next block (or the next free one), plus one
	level byte   // hashID.level
	wide  bool   // counts are in mirror.wide
	// expiring: a checkpoint of this owner, under the rules the copy was
	// loaded with, set the hash's expiry; later ones need not (ckptTTL).
	expiring bool
	counts   [60]int16
}

// hashID names one bucket hash of a subject: level 's' (seconds of a
// minute), 'm' (minutes of an hour) or 'h' (hours of a day) and its number.
type hashID struct {
	level byte
	n     int64
}

// span is how many seconds the hash covers (window.LevelSpan).
func (id hashID) span() int64 { return window.LevelSpan(id.level) }

// counts reads one hash's counts, narrow or wide.
type counts struct {
	b *block
	w *[60]int64
}

func (c counts) at(k int64) int64 {
	if c.w != nil {
		return c.w[k]
	}
	return int64(c.b.counts[k])
}

// sum adds fields lo..hi (none when lo > hi).
func (c counts) sum(lo, hi int64) int64 {
	if lo > hi {
		return 0
	}
	var s int64
	if c.w != nil {
		for _, v := range c.w[lo : hi+1] {
			s += v
		}
		return s
	}
	for _, v := range c.b.counts[lo : hi+1] {
		s += int64(v)
	}
	return s
}

func newMirror(t *tables, maxHashes int) *mirror {
	return &mirror{t: t, maxHashes: max(maxHashes, 1)}
}

// forget drops every copy; the tables' blocks are reset with the rooms.
func (m *mirror) forget() {
	m.free, m.hashes = 0, 0
	clear(m.wide)
}

// find returns the block of r's hash id, plus one (0: not held).
func (m *mirror) find(r *room, id hashID) uint32 {
	for bi := r.copies; bi != 0; {
		b := m.t.blocks.At(int(bi - 1))
		if b.level == id.level && b.n == id.n {
			return bi
		}
		bi = b.next
	}
	return 0
}

// get returns the counts of r's hash id, false when not loaded.
func (m *mirror) get(r *room, id hashID) (counts, bool) {
	bi := m.find(r, id)
	if bi == 0 {
		return counts{}, false
	}
	return m.counts(bi), true
}

func (m *mirror) counts(bi uint32) counts {
	b := m.t.blocks.At(int(bi - 1))
	if b.wide {
		return counts{b: b, w: m.wide[bi]}
	}
	return counts{b: b}
}

// store holds a loaded hash of r.
func (m *mirror) store(r *room, id hashID, h []int64) {
	bi := m.find(r, id)
	if bi == 0 {
		bi = m.alloc()
		m.t.blocks.At(int(bi - 1)).next = r.copies
		r.copies = bi
		m.hashes++
	}
	b := m.t.blocks.At(int(bi - 1))
	b.level, b.n, b.expiring = id.level, id.n, false
	if b.wide {
		delete(m.wide, bi)
		b.wide = false
	}
	b.counts = [60]int16{}
	for k, v := range h {
		m.set(bi, b, int64(k), v)
	}
}

// add adds n to field k of block bi.
func (m *mirror) add(bi uint32, k, n int64) {
	b := m.t.blocks.At(int(bi - 1))
	if b.wide {
		m.wide[bi][k] += n
		return
	}
	m.set(bi, b, k, int64(b.counts[k])+n)
}

func (m *mirror) set(bi uint32, b *block, k, v int64) {
	if !b.wide && v != int64(int16(v)) {
		m.widen(bi, b)
	}
	if b.wide {
		m.wide[bi][k] = v
		return
	}
	b.counts[k] = int16(v)
}

// widen moves a block's counts to the heap, 64 bits each: until the block
// is freed.
func (m *mirror) widen(bi uint32, b *block) {
	if b.wide {
		return
	}
	w := new([60]int64)
	for k, v := range b.counts {
		w[k] = int64(v)
	}
	if m.wide == nil {
		m.wide = map[uint32]*[60]int64{}
	}
	m.wide[bi], b.wide = w, true
}

func (m *mirror) alloc() uint32 {
	if bi := m.free; bi != 0 {
		m.free = m.t.blocks.At(int(bi - 1)).next
		return bi
	}
	return uint32(m.t.blocks.Append() + 1)
}

func (m *mirror) release(bi uint32) {
	b := m.t.blocks.At(int(bi - 1))
	if b.wide {
		delete(m.wide, bi)
		b.wide = false
	}
	b.next, m.free = m.free, bi
	m.hashes--
}

// drop frees every copy of r.
func (m *mirror) drop(r *room) {
	for bi := r.copies; bi != 0; {
		next := m.t.blocks.At(int(bi - 1)).next
		m.release(bi)
		bi = next
	}
	r.copies = 0
}

// trim drops copies when over the bound, from a random room on: after a
// batch's evaluations, so that one batch's loads never evict each other
// (its subjects' copies are bounded by the subjects of a script run).
func (m *mirror) trim() {
	if m.hashes <= m.maxHashes {
		return
	}
	n := m.t.rooms.len()
	start := rand.IntN(max(n, 1))
	for i := 0; i < n && m.hashes > m.maxHashes*3/4; i++ {
		m.drop(m.t.rooms.at((start + i) % n))
	}
}

func fieldsOf(level byte) int64 {
	if level == 'h' {
		return 24
	}
	return 60
}

// add applies a batch's increments (sumLevels) to the hashes r's copy
// holds.
func (m *mirror) addSums(r *room, sums []bucketSum) {
	// sums are sorted by hash (sumLevels): a hash's fields are found with
	// one walk of r's blocks, not one each.
	var bi uint32
	for i, w := range sums {
		if i == 0 || w.id != sums[i-1].id {
			bi = m.find(r, w.id)
		}
		if bi != 0 {
			m.add(bi, w.field, w.n)
		}
	}
}

// addTo applies a batch's increments to one hash h, not held yet.
func addTo(h []int64, id hashID, sums []bucketSum) {
	for _, w := range sums {
		if w.id == id {
			h[w.field] += w.n
		}
	}
}

type bucketField struct {
	id    hashID
	field int64
}

// levelsOf is where fg_incr counts an event of second sec: its second, and
// its minute and hour when windows of maxw read those levels.
func levelsOf(sec, maxw int64) ([3]bucketField, int) {
	var out [3]bucketField
	lv := window.Levels(maxw)
	for i := 0; i < len(lv); i++ {
		span, fields := window.LevelSpan(lv[i]), fieldsOf(lv[i])
		out[i] = bucketField{hashID{lv[i], floorDiv(sec, span)}, floorMod(floorDiv(sec, span/fields), fields)}
	}
	return out, len(lv)
}

// prune drops r's hashes no window of maxw can read at now, returning how
// many; once a minute is enough.
func (m *mirror) prune(r *room, now, maxw, slack int64) int {
	minute := uint32(min(max(floorDiv(now, 60), 0), math.MaxUint32))
	if minute == r.pruned {
		return 0
	}
	r.pruned = minute
	n := 0
	link := &r.copies
	for bi := *link; bi != 0; bi = *link {
		b := m.t.blocks.At(int(bi - 1))
		id := hashID{b.level, b.n}
		if end := (id.n+1)*id.span() - 1; end+maxw+slack < now {
			*link = b.next
			m.release(bi)
			n++
			continue
		}
		link = &b.next
	}
	return n
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// seg is a run of fields lo..hi of one hash, as fg_split cuts a window.
type seg struct {
	id     hashID
	lo, hi int64
}

// evaluation evaluates one subject's windows over its copy, noting the
// hashes it lacks in missing (the result is then not to be used).
type evaluation struct {
	m          *mirror
	r          *room // nil: the subject cannot be held, nothing is loaded
	missing    map[hashID]bool
	segs, useg []seg // scratch of sum and until
	// found are the hashes this subject's evaluation read so far: its
	// limits' windows read the same few hashes over and over, and a walk
	// of the room's chain of blocks for each was a twentieth of the
	// aggregator's CPU.
	found []foundHash
	state []byte      // scratch of stateOf
	near  []nearLimit // scratch of eval
}

type foundHash struct {
	id hashID
	c  counts
}

// start readies ev for the subject of room r (nil: it cannot be held).
func (ev *evaluation) start(m *mirror, r *room) {
	ev.m, ev.r, ev.missing, ev.found = m, r, nil, ev.found[:0]
}

func (ev *evaluation) hash(id hashID) (counts, bool) {
	for i := range ev.found {
		if ev.found[i].id == id {
			return ev.found[i].c, true
		}
	}
	var h counts
	ok := false
	if ev.r != nil {
		h, ok = ev.m.get(ev.r, id)
	}
	if !ok {
		if ev.missing == nil {
			ev.missing = map[hashID]bool{}
		}
		ev.missing[id] = true
		return h, false
	}
	ev.found = append(ev.found, foundHash{id, h})
	return h, true
}

func appendSegs(out []seg, level byte, per, a, b int64) []seg {
	for a <= b {
		var n int64
		switch per { // constants: a multiplication, not a division
		case 60:
			n = floorDiv(a, 60)
		case 24:
			n = floorDiv(a, 24)
		default:
			n = floorDiv(a, per)
		}
		e := min(b, n*per+per-1)
		out = append(out, seg{hashID{level, n}, a - n*per, e - n*per})
		a = e + 1
	}
	return out
}

// appendSM covers seconds a..b with whole minutes in the middle when useM.
func appendSM(out []seg, a, b int64, useM bool) []seg {
	if a > b {
		return out
	}
	m1, m2 := ceilDiv(a, 60), floorDiv(b+1, 60)-1
	if !useM || m1 > m2 {
		return appendSegs(out, 's', 60, a, b)
	}
	out = appendSegs(out, 's', 60, a, m1*60-1)
	out = appendSegs(out, 'm', 60, m1, m2)
	return appendSegs(out, 's', 60, (m2+1)*60, b)
}

// split is fg_split: the segments covering seconds a..b in time order, the
// coarsest levels a window of w seconds may use.
func split(out []seg, a, b, w int64) []seg {
	if w <= 3600 {
		return appendSM(out, a, b, w > 60)
	}
	h1, h2 := ceilDiv(a, 3600), floorDiv(b+1, 3600)-1
	if h1 > h2 {
		return appendSM(out, a, b, true)
	}
	out = appendSM(out, a, h1*3600-1, true)
	out = appendSegs(out, 'h', 24, h1, h2)
	return appendSM(out, (h2+1)*3600, b, true)
}

// sum is fg_sum: events in the window of w seconds ending with second t.
func (ev *evaluation) sum(t, w int64) int64 {
	ev.segs = split(ev.segs[:0], t-w+1, t, w)
	var s int64
	for _, sg := range ev.segs {
		if h, ok := ev.hash(sg.id); ok {
			s += h.sum(sg.lo, sg.hi)
		}
	}
	return s
}

// walk is fg_walk: through a segment in time order until need events were
// seen; the events seen and the second of the event that completes need
// (drilling to finer levels), ok false when need is not reached.
func (ev *evaluation) walk(sg seg, need int64) (got, sec int64, ok bool) {
	h, ok := ev.hash(sg.id)
	if !ok {
		return 0, 0, false
	}
	for k := sg.lo; k <= sg.hi; k++ {
		v := h.at(k)
		if v == 0 {
			continue
		}
		if got+v >= need {
			var sub seg
			var last int64
			switch sg.id.level {
			case 's':
				return got + v, sg.id.n*60 + k, true
			case 'm':
				m := sg.id.n*60 + k
				sub, last = seg{hashID{'s', m}, 0, 59}, m*60+59
			default:
				hr := sg.id.n*24 + k
				sub, last = seg{hashID{'m', hr}, 0, 59}, hr*3600+3599
			}
			_, s, found := ev.walk(sub, need-got)
			if !found {
				// A missing finer level falls back to the end of the
				// coarse bucket, as the script does: late, never early.
				s = last
			}
			return got + v, s, true
		}
		got += v
	}
	return got, 0, false
}

// until is fg_until (no ahead): the first second after t at which the
// window of w seconds ending at t has dropped excess events.
func (ev *evaluation) until(t, w, excess int64) int64 {
	ev.useg = split(ev.useg[:0], t-w+1, t, w)
	need := excess
	for _, sg := range ev.useg {
		got, sec, ok := ev.walk(sg, need)
		if ok {
			return sec + w
		}
		need -= got
	}
	return t + w
}

// verdict is what the script's fg_eval finds for one subject: the deny and
// shadow candidates with the latest until, each near limit, and the
// headroom of each limit.
type verdict struct {
	best [2]*candidate // deny, shadow
	near []nearLimit
	h    []int64
	// state is the subject's state as the limiter reads it ('' for none:
	// near no limit), built as the script builds it; expires is the second
	// it stops saying anything.
	state   string
	expires int64
	// blocks: a near limit of the state has no room for one more event.
	blocks bool
}

type candidate struct {
	l, count, untilMS, t int64
}

type nearLimit struct {
	l, count, until int64 // l counts from 1, as in the script
}

// eval is fg_eval over the copy for the planned limits of pr at second e
// and, when e lies ahead of now, at now too. It returns false when a hash
// the evaluation read is missing (ev.missing says which).
func (ev *evaluation) eval(pr *profile, plan string, e, now int64) (verdict, bool) {
	v := verdict{h: make([]int64, len(pr.limits))}
	for i := range v.h {
		v.h[i] = notEvaluated
	}
	// l 0: not near; the evaluation's scratch, as only v.near's copies
	// outlive it
	near := append(ev.near[:0], make([]nearLimit, len(pr.limits))...)
	ev.near = near
	at := func(t int64) {
		for i, lim := range pr.limits {
			if plan != evalAll && plan[i] != '1' {
				continue
			}
			L, w := lim.limit.Count, int64(lim.limit.Window/time.Second)
			count := ev.sum(t, w)
			thr := (L + 1) / 2
			v.h[i] = min(v.h[i], thr-count)
			if count >= thr {
				var u int64
				if count >= L {
					u = ev.until(t, w, count+1-L)
				}
				if nr := &near[i]; nr.l == 0 {
					*nr = nearLimit{int64(i) + 1, count, u}
				} else {
					nr.count, nr.until = max(nr.count, count), max(nr.until, u)
				}
			}
			if count > L {
				c := &candidate{int64(i) + 1, count, ev.until(t, w, count-L) * 1000, t}
				k := 0
				if lim.rule.Shadow {
					k = 1
				}
				if v.best[k] == nil || c.untilMS > v.best[k].untilMS {
					v.best[k] = c
				}
			}
		}
	}
	at(e)
	if e > now {
		at(now)
	}
	for i := range pr.limits {
		if near[i].l != 0 {
			v.near = append(v.near, near[i])
			v.blocks = v.blocks || near[i].until != 0
		}
	}
	v.state, v.expires, ev.state = stateOf(ev.state[:0], pr, v.near, max(e, now))
	return v, len(ev.missing) == 0
}

// stateOf builds a subject's state JSON from its near limits at second t
// (rule names are [a-z0-9_.-]: quoting them is JSON),
// the format ParseState reads: {"t":t,"l":[[rule,limit,window,count,until]...]}.
// It is built in b, which it returns grown, and copied once into the
// string.
func stateOf(b []byte, pr *profile, near []nearLimit, t int64) (string, int64, []byte) {
	if len(near) == 0 {
		return "", 0, b
	}
	b = append(b, `{"t":`...)
	b = strconv.AppendInt(b, t, 10)
	b = append(b, `,"l":[`...)
	var x int64
	for k, nr := range near {
		lim := pr.limits[nr.l-1]
		w := int64(lim.limit.Window / time.Second)
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendQuote(b, lim.rule.Name)
		for _, n := range []int64{lim.limit.Count, w, nr.count, nr.until} {
			b = append(b, ',')
			b = strconv.AppendInt(b, n, 10)
		}
		b = append(b, ']')
		x = max(x, nr.until, t+w)
	}
	b = append(b, "]}"...)
	return string(b), x, b
}

// appendArgs appends the verdict as the apply script reads it (0: none).
func (v *verdict) appendArgs(args []any) []any {
	if v == nil {
		return append(args, 0)
	}
	nb := 0
	for _, c := range v.best {
		if c != nil {
			nb++
		}
	}
	args = append(args, 1, nb)
	for k, c := range v.best {
		if c != nil {
			args = append(args, k, c.l, c.count, c.untilMS, c.t)
		}
	}
	return append(args, v.state, v.expires)
}

// maxLoadRounds bounds the loads of one batch: a sum reads the hashes its
// window spans, coarsest level first (up to three rounds: loadplan.go), and
// finding when a deny ends drills from an hour to its minutes to their
// seconds (two more). A subject still missing hashes after that is
// evaluated by the script.
const maxLoadRounds = 6

// evalMirrored brings the partition's copies up to date with the batch and
// evaluates, from them, the subjects whose plans ask for it and whose
// profiles allow it, loading what the copies lack. Subjects with events a
// strict take counted are dropped from the copies (the take wrote their
// buckets).
func (s *Applier) evalMirrored(ctx context.Context, offkey, group string, b consume.Batch, pl *profiles, order []*pendingSubject, hr *Headroom, nowSec int64) error {
	m := hr.mir
	defer m.trim()
	slack := int64(s.slack / time.Second)
	var want []*pendingSubject
	for _, ps := range order {
		pr := &pl.list[ps.profile]
		r := hr.roomOf(ps.sub)
		if !pr.mirrored || ps.counted {
			if r != nil {
				m.drop(r)
			}
			if !ps.memory {
				continue
			}
		}
		if r != nil {
			m.addSums(r, ps.sums)
			m.prune(r, nowSec, pr.maxw, slack)
		}
		if ps.plan != evalNone {
			want = append(want, ps)
		}
	}
	held := redisHeld{}
	for round := 0; len(want) > 0 && round < maxLoadRounds; round++ {
		missing := map[*pendingSubject]map[hashID]bool{}
		var again []*pendingSubject
		var ev evaluation // its scratch serves every subject
		for _, ps := range want {
			pr := &pl.list[ps.profile]
			ev.start(m, hr.roomFor(ps.sub, len(pr.limits)+len(pr.buckets)))
			v, ok := ev.eval(&pl.list[ps.profile], ps.plan, ps.eval, nowSec)
			if ok {
				ps.verdict = &v
				continue
			}
			missing[ps] = ev.missing
			again = append(again, ps)
		}
		if len(again) == 0 {
			return nil
		}
		if err := s.loadMirrored(ctx, offkey, group, b, missing, planLoads(missing, held, pl), held, hr); err != nil {
			return err
		}
		want = again
	}
	return nil
}

// loadMirrored loads the missing hashes into the copies, each with the
// batch's increments added (the script adds them to Redis after this read):
// those of plan.read from Redis, those of plan.made from memory alone, and
// notes in held what Redis held in each.
// The read's offset and change sequence must be those the copies are as of;
// the first load after the copies were forgotten sets them.
//
// The read is one pipeline of plain commands, offset and change sequence
// first: every write that can change a hash (an apply, an operator's
// action) also moves one of the two, so a write landing between those reads
// and the hashes' leaves the copies older than what Redis holds, and the
// apply script, finding another offset or sequence than the copies are as
// of, refuses their verdicts. (A Lua script gave an atomic snapshot for
// twice the Redis time: its loop and the conversion of every reply to Lua
// and back.)
//
// A write-back owner's copies hold what Redis does not (its increments since
// the checkpoint): the read is a transaction, with the checkpoint offset,
// and a hash loaded gets them added. Any other offset or sequence than the
// owner's means another writer: errFenced.
func (s *Applier) loadMirrored(ctx context.Context, offkey, group string, b consume.Batch, missing map[*pendingSubject]map[hashID]bool, plan loadPlan, held redisHeld, hr *Headroom) error {
	partition := b.Partition
	var scratch [60]int64 // store and addPending keep none of it
	for ps, ids := range plan.made {
		for _, id := range ids {
			s.copyEmpty(scratch[:], ps, id, hr)
		}
	}
	var targets []loadTarget
	for ps, ids := range plan.read {
		for id := range ids {
			targets = append(targets, loadTarget{ps, id})
		}
	}
	start := time.Now()
	pipe := s.rdb.Pipeline()
	if hr.wb != nil {
		pipe = s.rdb.TxPipeline() // the hashes as of the fencing values read with them
	}
	fence := s.readFence(ctx, pipe, offkey, group, b.Topic, partition, hr.wb != nil)
	hashes := s.readHashes(ctx, pipe, partition, targets)
	stated := s.readStated(ctx, pipe, partition, missing, hr)
	if len(targets) == 0 && len(stated.cmds) == 0 {
		return nil // all made from memory: nothing to send
	}
	_, err := pipe.Exec(ctx)
	s.st.Observe("mirror", start)
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("load bucket copies partition=%d: %w", partition, err)
	}
	if err := fence.check(hr, partition); err != nil {
		return err
	}
	stated.learn(hr)
	for i, t := range targets {
		h := scratch[:fieldsOf(t.id.level)]
		mask, err := loadedCounts(h, hashes[i].Val())
		if err != nil {
			hr.forget()
			return fmt.Errorf("load bucket copies partition=%d: %c:%d: %w", partition, t.id.level, t.id.n, err)
		}
		held.note(t.ps, t.id, mask)
		s.copyLoaded(h, t.ps, t.id, hr)
	}
	return nil
}

// loadTarget is a hash a load reads.
type loadTarget struct {
	ps *pendingSubject
	id hashID
}

// readHashes queues the reads of targets' hashes in pipe.
func (s *Applier) readHashes(ctx context.Context, pipe redis.Pipeliner, partition int, targets []loadTarget) []*redis.MapStringStringCmd {
	hashes := make([]*redis.MapStringStringCmd, len(targets))
	slot := s.keys.Slot(partition)
	var bk bucketKeys
	var fk []byte
	var last *pendingSubject
	for i, t := range targets {
		if t.ps != last {
			bk.subjectOf(slot, t.ps.sub, &fk)
			last = t.ps
		}
		hashes[i] = pipe.HGetAll(ctx, bk.key(t.id.level, t.id.n))
	}
	return hashes
}

// loadedCounts reads a loaded hash into h (cleared first), and returns
// the mask of its fields with a count.
func loadedCounts(h []int64, fields map[string]string) (mask uint64, err error) {
	clear(h)
	for fs, ns := range fields {
		field, err1 := strconv.ParseInt(fs, 10, 64)
		n, err2 := strconv.ParseInt(ns, 10, 64)
		if err1 != nil || err2 != nil || field < 0 || field >= int64(len(h)) {
			return 0, fmt.Errorf("field %v=%v is not a bucket count", fs, ns)
		}
		h[field] = n
		if n != 0 {
			mask |= 1 << field
		}
	}
	return mask, nil
}

// loadFence is the fencing values a load reads with its hashes: the
// copies are only as good as the slot is as hr knows it.
type loadFence struct {
	off, seq, ck *redis.StringCmd // ck: write-back only
}

func (s *Applier) readFence(ctx context.Context, pipe redis.Pipeliner, offkey, group, topic string, partition int, writeBack bool) loadFence {
	var f loadFence
	if writeBack {
		f.ck = pipe.Get(ctx, s.keys.Checkpoint(group, topic, partition))
	}
	f.off = pipe.Get(ctx, offkey)
	f.seq = pipe.Get(ctx, s.keys.Seq(partition))
	return f
}

// check compares the fence with what hr is as of: a write-back owner's
// memory is fenced off when the slot moved; copies of a write-through
// sink are forgotten (errMirrorStale), or learn the slot's values when
// hr holds none yet.
func (f loadFence) check(hr *Headroom, partition int) error {
	next, err := optionalInt(f.off, -1)
	if err != nil {
		return fmt.Errorf("load bucket copies partition=%d: offset: %w", partition, err)
	}
	seq, err := optionalInt(f.seq, 0)
	if err != nil {
		return fmt.Errorf("load bucket copies partition=%d: change sequence: %w", partition, err)
	}
	if wb := hr.wb; wb != nil {
		c, err := optionalInt(f.ck, -1)
		if err != nil {
			return fmt.Errorf("load bucket copies partition=%d: checkpoint: %w", partition, err)
		}
		if next != hr.next || seq != hr.seq || (wb.cKept && c != wb.c) || (!wb.cKept && c >= 0) {
			hr.forget()
			return fmt.Errorf("load bucket copies partition=%d: offset %d, checkpoint %d, change sequence %d; this owner's %d, %d, %d: %w",
				partition, next, c, seq, hr.next, wb.c, hr.seq, errFenced)
		}
		return nil
	}
	switch {
	case hr.next == -2 && hr.mir.hashes == 0:
		hr.next, hr.seq = next, seq
	case next != hr.next || seq != hr.seq:
		hr.forget()
		return errMirrorStale
	}
	return nil
}

// copyLoaded keeps h, hash id of ps as Redis holds it, as its copy: with
// the batch's increments and the owner's since its checkpoint.
func (s *Applier) copyLoaded(h []int64, ps *pendingSubject, id hashID, hr *Headroom) {
	addTo(h, id, ps.sums)
	hr.wb.addPending(h, ps.sub, id)
	if r := hr.roomOf(ps.sub); r != nil {
		hr.mir.store(r, id, h)
	}
}

// copyEmpty is copyLoaded of a hash Redis holds nothing in; scratch is
// the hash's room (60 fields), which it keeps none of.
func (s *Applier) copyEmpty(scratch []int64, ps *pendingSubject, id hashID, hr *Headroom) {
	h := scratch[:fieldsOf(id.level)]
	clear(h)
	s.copyLoaded(h, ps, id, hr)
}

// statedReads are the reads of whether the slot holds a state for
// subjects whose rooms do not know.
type statedReads struct {
	subs []*pendingSubject
	cmds []*redis.BoolCmd
}

// readStated queues, in a write-back owner's load, a read of whether the
// slot holds a state for each subject whose room does not know: a new
// subject with none, whose verdict has none either, then writes nothing
// (Headroom.quiet) rather than making decide.lua look. The load is one
// transaction with D and the change sequence, so the answer is as of
// what memory is.
func (s *Applier) readStated(ctx context.Context, pipe redis.Pipeliner, partition int, missing map[*pendingSubject]map[hashID]bool, hr *Headroom) statedReads {
	var sr statedReads
	if hr.wb == nil {
		return sr
	}
	key := s.keys.State(partition)
	for ps := range missing {
		if r := hr.roomOf(ps.sub); r != nil && r.stated == statedUnknown {
			sr.subs = append(sr.subs, ps)
			sr.cmds = append(sr.cmds, pipe.HExists(ctx, key, window.Field(ps.sub)))
		}
	}
	return sr
}

// learn marks the subjects the slot holds no state for.
func (sr statedReads) learn(hr *Headroom) {
	for i, ps := range sr.subs {
		if held, err := sr.cmds[i].Result(); err != nil || held {
			continue
		}
		if r := hr.roomOf(ps.sub); r != nil && r.stated == statedUnknown {
			r.stated = statedNone
		}
	}
}

// optionalInt reads an integer GET reply, def when the key does not exist.
func optionalInt(c *redis.StringCmd, def int64) (int64, error) {
	n, err := c.Int64()
	if errors.Is(err, redis.Nil) {
		return def, nil
	}
	return n, err
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
