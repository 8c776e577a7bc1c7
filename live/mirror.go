package live

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"floodgate/aggregator"
	"floodgate/window"
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
// quarter of the copies are dropped, at random.
type mirror struct {
	subs      map[window.Subject]*mirrored
	hashes    int // held by all subjects
	maxHashes int
}

// hashID names one bucket hash of a subject: level 's' (seconds of a
// minute), 'm' (minutes of an hour) or 'h' (hours of a day) and its number.
type hashID struct {
	level byte
	n     int64
}

// span is how many seconds the hash covers (window.LevelSpan).
func (id hashID) span() int64 { return window.LevelSpan(id.level) }

// mirrored holds the hashes of one subject that the copy knows, each as
// many counts as its level has fields (absent: not loaded). A subject has
// one to six: a slice searched costs a fraction of a map's memory.
type mirrored struct {
	hashes []copied
	pruned int64 // minute of the last prune
}

type copied struct {
	id     hashID
	counts []int64
}

// get returns the counts of hash id, nil when not loaded.
func (ms *mirrored) get(id hashID) []int64 {
	for i := range ms.hashes {
		if ms.hashes[i].id == id {
			return ms.hashes[i].counts
		}
	}
	return nil
}

func newMirror(maxHashes int) *mirror {
	return &mirror{subs: map[window.Subject]*mirrored{}, maxHashes: max(maxHashes, 1)}
}

func (m *mirror) forget() {
	clear(m.subs)
	m.hashes = 0
}

func (m *mirror) drop(sub window.Subject) {
	if ms := m.subs[sub]; ms != nil {
		m.hashes -= len(ms.hashes)
		delete(m.subs, sub)
	}
}

// store holds a loaded hash.
func (m *mirror) store(ms *mirrored, id hashID, h []int64) {
	for i := range ms.hashes {
		if ms.hashes[i].id == id {
			ms.hashes[i].counts = h
			return
		}
	}
	ms.hashes = append(ms.hashes, copied{id: id, counts: h})
	m.hashes++
}

// trim drops copies at random when over the bound: after a batch's
// evaluations, so that one batch's loads never evict each other (its
// subjects' copies are bounded by the subjects of a script run).
func (m *mirror) trim() {
	if m.hashes <= m.maxHashes {
		return
	}
	for sub := range m.subs { // random order
		if m.hashes <= m.maxHashes*3/4 {
			break
		}
		m.drop(sub)
	}
}

func fieldsOf(level byte) int64 {
	if level == 'h' {
		return 24
	}
	return 60
}

// subject returns sub's copy, creating an empty one.
func (m *mirror) subject(sub window.Subject) *mirrored {
	ms := m.subs[sub]
	if ms == nil {
		ms = &mirrored{}
		m.subs[ownKey(sub)] = ms
	}
	return ms
}

// ownKey returns sub with its strings in one allocation of their own: a
// key made of a decoded batch's strings would keep their buffers alive.
func ownKey(sub window.Subject) window.Subject {
	f := window.Field(sub)
	a, k := len(sub.Action), len(sub.Kind)
	return window.Subject{Action: f[:a], Kind: f[a+1 : a+1+k], Subject: f[a+1+k+1:]}
}

// add applies a batch's increments (sumLevels) to the hashes the copy
// holds.
func (ms *mirrored) add(sums []bucketSum) {
	for _, w := range sums {
		if h := ms.get(w.id); h != nil {
			h[w.field] += w.n
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

// prune drops hashes no window of maxw can read at now, returning how
// many; once a minute is enough.
func (ms *mirrored) prune(now, maxw, slack int64) int {
	n := 0
	if floorDiv(now, 60) == ms.pruned {
		return 0
	}
	ms.pruned = floorDiv(now, 60)
	kept := ms.hashes[:0]
	for _, c := range ms.hashes {
		if end := (c.id.n+1)*c.id.span() - 1; end+maxw+slack < now {
			n++
			continue
		}
		kept = append(kept, c)
	}
	clear(ms.hashes[len(kept):]) // let the dropped counts go
	ms.hashes = kept
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
	ms         *mirrored
	missing    map[hashID]bool
	segs, useg []seg // scratch of sum and until
}

func (ev *evaluation) hash(id hashID) []int64 {
	h := ev.ms.get(id)
	if h == nil {
		if ev.missing == nil {
			ev.missing = map[hashID]bool{}
		}
		ev.missing[id] = true
	}
	return h
}

func appendSegs(out []seg, level byte, per, a, b int64) []seg {
	for a <= b {
		n := floorDiv(a, per)
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
		h := ev.hash(sg.id)
		for k := sg.lo; h != nil && k <= sg.hi; k++ {
			s += h[k]
		}
	}
	return s
}

// walk is fg_walk: through a segment in time order until need events were
// seen; the events seen and the second of the event that completes need
// (drilling to finer levels), ok false when need is not reached.
func (ev *evaluation) walk(sg seg, need int64) (got, sec int64, ok bool) {
	h := ev.hash(sg.id)
	if h == nil {
		return 0, 0, false
	}
	for k := sg.lo; k <= sg.hi; k++ {
		v := h[k]
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
	near := make([]nearLimit, len(pr.limits)) // l 0: not near
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
		}
	}
	v.state, v.expires = stateOf(pr, v.near, max(e, now))
	return v, len(ev.missing) == 0
}

// stateOf builds a subject's state JSON from its near limits at second t
// (rule names are [a-z0-9_.-]: quoting them is JSON),
// the format ParseState reads: {"t":t,"l":[[rule,limit,window,count,until]...]}.
func stateOf(pr *profile, near []nearLimit, t int64) (string, int64) {
	if len(near) == 0 {
		return "", 0
	}
	b := make([]byte, 0, 32+48*len(near))
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
	return string(append(b, "]}"...)), x
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
// window spans (one round), and finding when a deny ends drills from an
// hour to its minutes to their seconds (two more). A subject still missing
// hashes after that is evaluated by the script.
const maxLoadRounds = 4

// evalMirrored brings the partition's copies up to date with the batch and
// evaluates, from them, the subjects whose plans ask for it and whose
// profiles allow it, loading what the copies lack. Subjects with events a
// strict take counted are dropped from the copies (the take wrote their
// buckets).
func (s *Applier) evalMirrored(ctx context.Context, offkey, group string, b aggregator.Batch, pl *profiles, order []*pendingSubject, hr *Headroom, nowSec int64) error {
	m := hr.mir
	defer m.trim()
	slack := int64(s.slack / time.Second)
	var want []*pendingSubject
	for _, ps := range order {
		pr := &pl.list[ps.profile]
		if !pr.mirrored || ps.counted {
			m.drop(ps.sub)
			if !ps.memory {
				continue
			}
		}
		if ms := m.subs[ps.sub]; ms != nil {
			ms.add(ps.sums)
			m.hashes -= ms.prune(nowSec, pr.maxw, slack)
		}
		if ps.plan != evalNone {
			want = append(want, ps)
		}
	}
	for round := 0; len(want) > 0 && round < maxLoadRounds; round++ {
		missing := map[*pendingSubject]map[hashID]bool{}
		var again []*pendingSubject
		var ev evaluation // its scratch serves every subject
		for _, ps := range want {
			ev.ms, ev.missing = m.subject(ps.sub), nil
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
		if err := s.loadMirrored(ctx, offkey, group, b, missing, hr); err != nil {
			return err
		}
		want = again
	}
	return nil
}

// loadMirrored loads the missing hashes into the copies, each with the
// batch's increments added (the script adds them to Redis after this read).
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
func (s *Applier) loadMirrored(ctx context.Context, offkey, group string, b aggregator.Batch, missing map[*pendingSubject]map[hashID]bool, hr *Headroom) error {
	partition := b.Partition
	type target struct {
		ps *pendingSubject
		id hashID
	}
	var targets []target
	for ps, ids := range missing {
		for id := range ids {
			targets = append(targets, target{ps, id})
		}
	}
	start := time.Now()
	wb := hr.wb
	pipe := s.rdb.Pipeline()
	var ckCmd *redis.StringCmd
	if wb != nil {
		pipe = s.rdb.TxPipeline()
		ckCmd = pipe.Get(ctx, s.keys.Checkpoint(group, b.Topic, partition))
	}
	offCmd := pipe.Get(ctx, offkey)
	seqCmd := pipe.Get(ctx, s.keys.Seq(partition))
	hashes := make([]*redis.MapStringStringCmd, len(targets))
	for i, t := range targets {
		hashes[i] = pipe.HGetAll(ctx, window.BucketKey(s.keys.SubjectPrefix(partition, t.ps.sub), t.id.level, t.id.n))
	}
	_, err := pipe.Exec(ctx)
	s.st.Observe("mirror", start)
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("load bucket copies partition=%d: %w", partition, err)
	}
	next, err := optionalInt(offCmd, -1)
	if err != nil {
		return fmt.Errorf("load bucket copies partition=%d: offset: %w", partition, err)
	}
	seq, err := optionalInt(seqCmd, 0)
	if err != nil {
		return fmt.Errorf("load bucket copies partition=%d: change sequence: %w", partition, err)
	}
	if wb != nil {
		c, err := optionalInt(ckCmd, -1)
		if err != nil {
			return fmt.Errorf("load bucket copies partition=%d: checkpoint: %w", partition, err)
		}
		if next != hr.next || seq != hr.seq || (wb.cKept && c != wb.c) || (!wb.cKept && c >= 0) {
			hr.forget()
			return fmt.Errorf("load bucket copies partition=%d: offset %d, checkpoint %d, change sequence %d; this owner's %d, %d, %d: %w",
				partition, next, c, seq, hr.next, wb.c, hr.seq, errFenced)
		}
	}
	switch {
	case wb != nil:
	case hr.next == -2 && len(hr.subs) == 0:
		hr.next, hr.seq = next, seq
	case next != hr.next || seq != hr.seq:
		hr.forget()
		return errMirrorStale
	}
	for i, t := range targets {
		h := make([]int64, fieldsOf(t.id.level))
		for fs, ns := range hashes[i].Val() {
			field, err1 := strconv.ParseInt(fs, 10, 64)
			n, err2 := strconv.ParseInt(ns, 10, 64)
			if err1 != nil || err2 != nil || field < 0 || field >= int64(len(h)) {
				hr.forget()
				return fmt.Errorf("load bucket copies partition=%d: field %v=%v of %c:%d is not a bucket count", partition, fs, ns, t.id.level, t.id.n)
			}
			h[field] = n
		}
		addTo(h, t.id, t.ps.sums)
		addTo(h, t.id, wb.sumsOf(t.ps.sub))
		hr.mir.store(hr.mir.subject(t.ps.sub), t.id, h)
	}
	return nil
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
