package live

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/offheap"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// Write-back (docs/architecture.md, "Write-back"): the partition's owner
// keeps the bucket counts of its window-only subjects in memory and Redis
// keeps a checkpoint of them. Kafka's events topic is the changelog.
//
//   - C, the checkpoint offset: Redis holds those subjects' buckets as of
//     C. Every checkpoint writes the increments counted since the last one
//     (HINCRBY, one call per slot) and moves C, compare-and-set on C and on
//     the slot's change sequence.
//   - D, the decisions offset (the Offset key, as before): deny records and
//     states are written for every event before it (a state that moves
//     only counts waits for the checkpoint, deferred.go, which moves D
//     once it is written). A batch runs the apply
//     script only when it has something to write there (a verdict, a subject
//     the script counts); the script moves D, compare-and-set on D and the
//     change sequence. A checkpoint moves D up to C.
//
// A new owner (a restart, a rebalance, a rewind) resumes at C, replays
// C..D counting only (the script-counted subjects are in Redis as of D;
// a subject an operator reset skips its events before the reset's offset),
// and decides after D. Whatever it finds unexpected — another writer's
// offset, an operator's action, a checkpoint refused — forgets the
// partition's memory and reads the partition again from C: slower, never
// wrong.
type writeBack struct {
	c     int64 // checkpoint offset as last read or written; -1 unknown (fresh partition)
	cKept bool  // whether the slot holds a checkpoint key (else C is D: a write-through past)
	at    int64 // next offset after the last record counted in memory; -1 unknown
	// replayTo is D at the resume: records before it are counted only.
	replayTo int64
	// resets are the operators' reset boundaries at the resume, by field.
	resets map[string]int64
	// marks are, by field, the offsets an unfinished checkpoint's parts
	// wrote the subject's increments to (checkpoint_part.lua): a replay
	// skips its records before them.
	marks map[string]int64
	// rules are those the records from C on were counted under: which
	// subjects memory counts and which the script does. nil: unknown
	// (nothing stored), the current ones. stored is the text the slot
	// holds for them (kept with C).
	rules   *rules.Set
	stored  []byte
	pending *pending // the Headroom's tables'
	fields  int      // bucket fields pending
	// deferred are the verdicts held back until the checkpoint, by field
	// (deferred.go); pinned tells that a decision is among them, held back
	// from the batch at offset heldFrom on: D stays there until they are
	// written.
	deferred map[string]deferredState
	pinned   bool
	heldFrom int64
	// carried is how many held-back decisions the slot holds as this
	// owner's (carried.go; -1: unknown, the last owner's maybe), and
	// inherited the last owner's it has to write yet.
	carried   int
	inherited []byte
	// written are, by field, the decisions this owner wrote for its
	// subjects whose states block (deferred.go).
	written map[string]*written
}

// pending is a write-back owner's increments since the checkpoint, outside
// the Go heap (they are kept by subject and field until the next
// checkpoint, the partition's largest transient memory): per subject the
// largest window it is counted for and a chain of bucket fields.
type pending struct {
	subs *keyed[dirty]
	sums offheap.Array[pendingSum]
	// ids are the event ids counted into memory since the checkpoint, with
	// the second they were counted at (Dedup): written with C, so that a
	// replay from C counts their events again and sees their repeats.
	ids *keyed[int64]
	key []byte // scratch
}

// dirty is one subject's increments since the checkpoint.
type dirty struct {
	maxw int64
	sums uint32 // first pendingSum, plus one
}

// pendingSum is one bucket field's increment since the checkpoint: 24 bytes.
type pendingSum struct {
	hash  int64 // hashID.n
	n     int64
	next  uint32 // the subject's next pendingSum, plus one
	field uint8  // below 60
	level byte   // hashID.level
}

func (p *pending) reset() {
	p.subs.reset()
	p.sums.Reset()
	p.ids.reset()
}

func (p *pending) free() {
	p.subs.free()
	p.sums.Free()
	p.ids.free()
}

// addID keeps an event id counted into memory at second sec; an id counts
// as a pending field (SinkConfig.MaxPending bounds both).
func (w *writeBack) addID(id string, sec int64) error {
	p := w.pending
	p.key = append(p.key[:0], id...)
	at, added := p.ids.add(p.key)
	if at == nil {
		return fmt.Errorf("keep event id %q: %w", id, errMemoryFull)
	}
	*at = sec
	if added {
		w.fields++
	}
	return nil
}

// seenAt returns the second id was counted into memory at, false when it
// was not since the checkpoint.
func (w *writeBack) seenAt(id string) (int64, bool) {
	if w == nil || w.pending.ids.len() == 0 {
		return 0, false
	}
	p := w.pending
	p.key = append(p.key[:0], id...)
	if at := p.ids.get(p.key); at != nil {
		return *at, true
	}
	return 0, false
}

// errMemoryFull: the pending increments' table holds 4 GiB of keys
// (SinkConfig.MaxPending keeps it far below).
var errMemoryFull = errors.New("write-back memory full")

func (w *writeBack) add(sub window.Subject, maxw int64, sums []bucketSum) error {
	if len(sums) == 0 {
		return nil
	}
	p := w.pending
	p.key = fieldKey(p.key, sub)
	d, _ := p.subs.add(p.key)
	if d == nil {
		return fmt.Errorf("keep the increments of %s: %w", p.key, errMemoryFull)
	}
	d.maxw = max(d.maxw, maxw)
	for _, s := range sums {
		if ps := p.find(d, s.bucketField); ps != nil {
			ps.n += s.n
			continue
		}
		i := p.sums.Append()
		*p.sums.At(i) = pendingSum{hash: s.id.n, n: s.n, next: d.sums, field: uint8(s.field), level: s.id.level}
		d.sums = uint32(i + 1)
		w.fields++
	}
	return nil
}

func (p *pending) find(d *dirty, f bucketField) *pendingSum {
	for i := d.sums; i != 0; {
		ps := p.sums.At(int(i - 1))
		if ps.level == f.id.level && ps.hash == f.id.n && int64(ps.field) == f.field {
			return ps
		}
		i = ps.next
	}
	return nil
}

// each calls fn with every pending increment of d.
func (p *pending) each(d *dirty, fn func(f bucketField, n int64)) {
	for i := d.sums; i != 0; {
		ps := p.sums.At(int(i - 1))
		fn(bucketField{hashID{ps.level, ps.hash}, int64(ps.field)}, ps.n)
		i = ps.next
	}
}

// addPending adds sub's pending increments of hash id to h, a copy loaded
// from the checkpoint.
func (w *writeBack) addPending(h []int64, sub window.Subject, id hashID) {
	if w == nil {
		return
	}
	p := w.pending
	p.key = fieldKey(p.key, sub)
	if d := p.subs.get(p.key); d != nil {
		p.each(d, func(f bucketField, n int64) {
			if f.id == id {
				h[f.field] += n
			}
		})
	}
}

// Offsets are a partition's offsets and fencing values as one atomic read
// found them.
type offsets struct {
	c, d   int64 // -1: not stored
	cKept  bool
	seq    int64
	resets map[string]int64
	marks  map[string]int64
	rules  []byte // nil: not stored
	held   []byte // the decisions carried past C (carried.go); nil: none
}

// readOffsets reads C, D, the change sequence and the reset boundaries of
// a partition in one transaction.
func (s *Applier) readOffsets(ctx context.Context, group, topic string, partition int) (offsets, error) {
	var cc, dc, sc *redis.StringCmd
	var rc *redis.MapStringStringCmd
	start := time.Now()
	p := s.rdb.TxPipeline()
	cc = p.Get(ctx, s.keys.Checkpoint(group, topic, partition))
	rsc := p.Get(ctx, s.keys.CheckpointRules(group, topic, partition))
	dc = p.Get(ctx, s.keys.Offset(group, topic, partition))
	sc = p.Get(ctx, s.keys.Seq(partition))
	rc = p.HGetAll(ctx, s.keys.Resets(partition))
	mc := p.HGetAll(ctx, s.keys.CheckpointMarks(group, topic, partition))
	hc := p.Get(ctx, s.keys.CheckpointHeld(group, topic, partition))
	_, err := p.Exec(ctx)
	s.st.Observe("resume", start)
	if err != nil && !errors.Is(err, redis.Nil) {
		return offsets{}, fmt.Errorf("read offsets group=%s partition=%d: %w", group, partition, err)
	}
	var o offsets
	var errs [3]error
	o.c, errs[0] = optionalInt(cc, -1)
	o.d, errs[1] = optionalInt(dc, -1)
	o.seq, errs[2] = optionalInt(sc, 0)
	if err := errors.Join(errs[:]...); err != nil {
		return offsets{}, fmt.Errorf("read offsets group=%s partition=%d: %w", group, partition, err)
	}
	o.cKept = o.c >= 0
	if !o.cKept {
		o.c = o.d // a write-through past: everything before D is in Redis
	}
	if b, err := rsc.Bytes(); err == nil {
		o.rules = b
	}
	if b, err := hc.Bytes(); err == nil && len(b) > 0 {
		o.held = b
	}
	o.resets = map[string]int64{}
	for f, v := range rc.Val() {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			o.resets[f] = n
		}
	}
	if o.marks, err = parseMarks(mc.Val(), o.c); err != nil {
		return offsets{}, fmt.Errorf("read offsets group=%s partition=%d: %w", group, partition, err)
	}
	return o, nil
}

// parseMarks reads the marks of checkpoint parts (checkpoint_part.lua)
// past C: by field, the furthest offset a part wrote it to. A mark that
// does not parse is an error: skipping what it names, or not, could count
// its records twice or not at all.
func parseMarks(h map[string]string, c int64) (map[string]int64, error) {
	marks := map[string]int64{}
	for f, v := range h {
		at, _, _ := strings.Cut(f, "/")
		to, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("checkpoint mark %q: %w", f, err)
		}
		if to <= c {
			continue // a part before C: its records are not replayed
		}
		var fields []string
		if err := json.Unmarshal([]byte(v), &fields); err != nil {
			return nil, fmt.Errorf("checkpoint mark %q: %w", f, err)
		}
		for _, field := range fields {
			marks[field] = max(marks[field], to)
		}
	}
	return marks, nil
}

// Resume makes hr a write-back owner's memory of the partition as of its
// checkpoint, empty, and returns the offset to read from (ok false: the
// partition was never applied). Everything hr knew is forgotten.
func (s *Applier) Resume(ctx context.Context, group, topic string, partition int, hr *Headroom) (next int64, ok bool, err error) {
	defer runtime.KeepAlive(hr) // see Apply
	o, err := s.readOffsets(ctx, group, topic, partition)
	if err != nil {
		return 0, false, err
	}
	var rs *rules.Set
	if o.rules != nil && o.cKept && o.c < o.d { // only a replay needs them
		if rs, err = rules.Parse(o.rules); err != nil {
			// Replaying under other rules would count twice what the script
			// counted, or drop what memory did: refuse, loudly.
			return 0, false, fmt.Errorf("resume partition %d: the rules its last owner counted under since offset %d do not parse here, so its records up to %d cannot be replayed exactly (run the version that wrote them to its next checkpoint): %w",
				partition, o.c, o.d, err)
		}
	}
	hr.drop()
	hr.wb = &writeBack{c: o.c, cKept: o.cKept, at: o.c, replayTo: o.d, resets: o.resets, marks: o.marks,
		rules: rs, stored: o.rules, pending: hr.t.pending, carried: -1, inherited: o.held}
	hr.next, hr.seq = o.d, o.seq
	hr.held = hr.held || o.c >= 0
	return o.c, o.c >= 0, nil
}

// errFenced: another writer moved the partition's offsets or an operator
// acted since this owner's memory was as of them.
var errFenced = errors.New("write-back fenced")

// rewind forgets hr's memory of the partition and resumes it from Redis's
// checkpoint: a *consume.RewindError when the batch b does not start
// there, for the partition to be read again from there.
func (s *Applier) rewind(ctx context.Context, group string, b consume.Batch, hr *Headroom, why error) error {
	next, ok, err := s.Resume(ctx, group, b.Topic, b.Partition, hr)
	if err != nil {
		hr.drop() // resumed lazily by the next batch
		return fmt.Errorf("resume partition %d after %v: %w", b.Partition, why, err)
	}
	if ok && next != b.First {
		return &consume.RewindError{Topic: b.Topic, Partition: b.Partition, Next: next, First: b.First,
			Reason: why.Error()}
	}
	return nil
}

// replay counts b, every record of it before the decisions offset D, into
// hr's write-back memory: a new owner's replay, nothing evaluated. Subjects
// the apply script counts are in Redis as of D already; a subject an
// operator reset skips its records before the reset's boundary.
func (s *Applier) replay(ctx context.Context, b consume.Batch, set *rules.Set, now time.Time, hr *Headroom, res *ApplyResult) error {
	wb := hr.wb
	nowSec := floorDiv(now.UnixMilli(), 1000)
	// The ids memory counted since C went with it: the events it counts
	// again are told from their repeats as they were, by the ids Redis
	// holds (as of C, and the script's up to D) and those counted here.
	dups, err := s.duplicates(ctx, b, set, nowSec, wb)
	if err != nil {
		return err
	}
	g := s.newGather(set, nowSec, b)
	for i := range b.Records {
		r := &b.Records[i]
		ps, sec, _ := g.subject(&r.Event, res)
		switch {
		case ps == nil:
		case r.Counted:
			res.CountedByLimiter++
		case !g.pl.list[ps.profile].mirrored:
			res.Replayed++
		case dups[i]:
			res.Duplicates++
		case r.Offset < wb.resets[window.Field(ps.sub)]:
			if s.dedup > 0 { // counted, then reset: its id still turns its repeats away
				ps.ids = append(ps.ids, r.Event.ID)
			}
			res.ResetSkipped++
		case len(wb.marks) > 0 && r.Offset < wb.marks[window.Field(ps.sub)]:
			// in Redis already (a checkpoint's part); its id goes with the
			// next checkpoint, as the ids of what it counts do
			if s.dedup > 0 {
				ps.ids = append(ps.ids, r.Event.ID)
			}
			res.PartSkipped++
		default:
			ps.incs.add(sec, max(r.Event.N, 1))
			if s.dedup > 0 {
				ps.ids = append(ps.ids, r.Event.ID)
			}
			res.Applied++
			res.Replayed++
		}
	}
	res.Subjects += len(g.order)
	sumLevels(g.pl, g.order)
	for _, ps := range g.order {
		if err := wb.add(ps.sub, g.pl.list[ps.profile].maxw, ps.sums); err != nil {
			hr.drop()
			return err
		}
		for _, id := range ps.ids {
			if err := wb.addID(id, nowSec); err != nil {
				hr.drop()
				return err
			}
		}
		if r := hr.roomOf(ps.sub); r != nil {
			hr.mir.addSums(r, ps.sums)
		}
	}
	wb.at = b.Last + 1
	return nil
}

// checkpointBody writes a partition's pending increments and moves its
// checkpoint offset (see its header); checkpointPartBody writes a part of
// them ahead of it; checkpointLib is what both share.
var (
	//go:embed checkpoint_lib.lua
	checkpointLib string
	//go:embed checkpoint.lua
	checkpointBody string
	//go:embed checkpoint_part.lua
	checkpointPartBody string
)

var (
	checkpointScript     = redis.NewScript("#!lua\n" + checkpointLib + checkpointBody)
	checkpointPartScript = redis.NewScript("#!lua\n" + checkpointLib + checkpointPartBody)
)

// checkpoint.lua's and checkpoint_part.lua's reply codes.
const (
	checkpointWritten = 0 // WRITTEN
	checkpointFenced  = 1 // FENCED: C or the change sequence moved
)

// Checkpoint writes the increments hr counted since the partition's last
// checkpoint and moves its checkpoint offset to the last record counted:
// in one script run, or, past ApplierConfig.CheckpointPart fields, in
// parts that each mark their subjects and a last run that moves C.
// Refused (another writer, an operator's action), it forgets hr's memory
// and returns an error wrapping errFenced: the next batch resumes from
// Redis's checkpoint. So does any failure once a part is written. A
// partition not in write-back or with nothing to write is left alone.
func (s *Applier) Checkpoint(ctx context.Context, group, topic string, partition int, hr *Headroom, now time.Time) (fields int, err error) {
	defer runtime.KeepAlive(hr) // see Apply
	if hr == nil || hr.wb == nil || hr.wb.at < 0 {
		return 0, nil
	}
	return s.checkpoint(ctx, group, topic, partition, hr, hr.wb.rules, now)
}

// checkpoint is Checkpoint that keeps rs with C: the rules the records
// after it are counted under.
func (s *Applier) checkpoint(ctx context.Context, group, topic string, partition int, hr *Headroom, rs *rules.Set, now time.Time) (fields int, err error) {
	wb := hr.wb
	if err := s.writeHeldBack(ctx, group, topic, partition, hr, now); err != nil {
		return 0, err
	}
	nowSec := floorDiv(now.UnixMilli(), 1000)
	text := rs.Source()
	keepRules := text != nil && !bytes.Equal(text, wb.stored)
	if wb.fields == 0 && wb.c == wb.at && wb.cKept && !keepRules {
		wb.rules = rs
		return 0, s.verifySlot(ctx, group, topic, partition, hr)
	}
	if !keepRules {
		text = nil
	}
	expect := wb.expectC()
	size := s.part
	if len(wb.marks) > 0 {
		// Resumed from a checkpoint that failed between its parts: this one
		// goes in one run, which a failure undoes whole, so that a fault
		// that persists neither adds marks nor rewinds the partition at
		// every interval. Parts again once C has passed the marks.
		size = math.MaxInt
	}
	parts, err := s.checkpointParts(group, partition, hr, nowSec, size)
	if err != nil {
		return 0, err
	}
	for i, pt := range parts[:len(parts)-1] {
		if err := s.writePart(ctx, group, topic, partition, hr, expect, i, pt); err != nil {
			// The parts before it are in Redis, marked, and so are they in
			// memory: forget it, and the next batch replays from C,
			// skipping what the parts wrote.
			hr.drop()
			return 0, err
		}
	}
	if err := s.writeLastPart(ctx, group, topic, partition, hr, expect, text, parts, nowSec); err != nil {
		return 0, err
	}
	return hr.checkpointWritten(parts[len(parts)-1], rs, text, nowSec), nil
}

// verifySlot reads the fencing values of a partition that has nothing to
// checkpoint, and fails with errFenced when they are not what memory is as
// of. A partition whose takes are all refused, or whose subjects are all
// held, writes nothing and may load nothing for long: without this, a slot
// Redis lost (or an operator's action) would go unnoticed until its next
// write, and the counts it held would not be counted again.
func (s *Applier) verifySlot(ctx context.Context, group, topic string, partition int, hr *Headroom) error {
	pipe := s.rdb.Pipeline()
	fence := s.readFence(ctx, pipe, s.keys.Offset(group, topic, partition), group, topic, partition, true)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("verify partition %d's slot: %w", partition, err)
	}
	if err := fence.check(hr, partition); err != nil {
		return fmt.Errorf("verify partition %d's slot: %w", partition, err)
	}
	return nil
}

// writeHeldBack writes what a checkpoint must precede: the last owner's
// held-back decisions, and this owner's.
func (s *Applier) writeHeldBack(ctx context.Context, group, topic string, partition int, hr *Headroom, now time.Time) error {
	if err := s.writeInherited(ctx, group, topic, partition, hr, now); err != nil {
		return err
	}
	nowSec := floorDiv(now.UnixMilli(), 1000)
	if err := s.writeDeferred(ctx, group, topic, partition, hr, now, s.carries(hr.wb, nowSec), false); err != nil {
		return err
	}
	return s.writeCarried(ctx, group, topic, partition, hr)
}

// writeLastPart runs checkpoint.lua: the last part's fields, the ids
// counted since C, the rules text to keep (nil: the slot holds it), and C
// moved to the last record counted. It drops hr's memory when the run is
// refused, or fails after earlier parts were written.
func (s *Applier) writeLastPart(ctx context.Context, group, topic string, partition int, hr *Headroom, expect string, text []byte, parts []ckptPart, nowSec int64) error {
	wb := hr.wb
	last := parts[len(parts)-1]
	p := wb.pending
	args := make([]any, 0, 9+len(last.fields)+2*p.ids.len())
	args = append(args, expect, wb.at, hr.seq, max(hr.next, -1), string(text), len(last.fields)/4)
	args = append(args, last.fields...)
	args = append(args, s.dedup, nowSec, p.ids.len())
	for i := range p.ids.len() {
		args = append(args, string(p.ids.key(i)), *p.ids.at(i))
	}
	keys := []string{s.keys.Checkpoint(group, topic, partition), s.keys.Offset(group, topic, partition),
		s.keys.Seq(partition), s.keys.Resets(partition), s.keys.CheckpointRules(group, topic, partition), s.keys.IDs(partition),
		s.keys.CheckpointMarks(group, topic, partition)}
	start := time.Now()
	out, err := checkpointScript.Run(ctx, s.rdb, keys, args...).Slice()
	s.st.Observe("checkpoint", start)
	if err != nil {
		// Written or not, unknown: the next checkpoint's compare-and-set
		// tells (a written one moved C: refused, and resumed from there).
		// Not once parts are written: a retry would write them twice.
		if len(parts) > 1 {
			hr.drop()
		}
		return fmt.Errorf("checkpoint group=%s partition=%d offset=%d: %w", group, partition, wb.at, err)
	}
	if replyInt(out, 0) != checkpointWritten {
		err := checkpointRefused(group, partition, out, expect, hr)
		hr.drop()
		return err
	}
	return nil
}

// checkpointWritten moves memory to the checkpoint just written, whose
// last part was last, under rules rs (text: kept with it, nil: kept
// before); it returns the fields written.
func (hr *Headroom) checkpointWritten(last ckptPart, rs *rules.Set, text []byte, nowSec int64) int {
	wb := hr.wb
	last.marked(hr.mir)
	n := wb.fields
	wb.pruneWritten(nowSec)
	wb.c, wb.cKept, wb.rules = wb.at, true, rs
	if text != nil {
		wb.stored = text
	}
	wb.pending.reset()
	wb.fields = 0
	hr.next = max(hr.next, wb.at)
	for f, at := range wb.resets {
		if at <= wb.c {
			delete(wb.resets, f)
		}
	}
	for f, at := range wb.marks {
		if at <= wb.c {
			delete(wb.marks, f)
		}
	}
	return n
}

// checkpointRefused is the errFenced of a checkpoint script's FENCED reply:
// what the slot holds against what hr is as of.
func checkpointRefused(group string, partition int, out []any, expect string, hr *Headroom) error {
	return fmt.Errorf("checkpoint group=%s partition=%d: the slot's checkpoint stands at %v, change sequence %v, decisions offset %v, not %s, %d and %d: %w",
		group, partition, replyAny(out, 1), replyAny(out, 2), replyAny(out, 3), expect, hr.seq, max(hr.next, -1), errFenced)
}

// ckptPart is one script run's share of a checkpoint: whole subjects.
type ckptPart struct {
	fields []any    // {bucket key, field, increment, ttl} per field
	subs   []string // the subjects' fields
	// expiring are the copies whose hashes the part sets the expiry of,
	// and minutes the rooms of subjects without one: once it is written,
	// later checkpoints need not (ckptTTL).
	expiring []uint32
	minutes  []roomMinute
}

// roomMinute is a room whose subject's hash of seconds of minute n a
// checkpoint part sets the expiry of.
type roomMinute struct {
	r *room
	n uint32
}

// marked remembers the expiries a written part set.
func (pt *ckptPart) marked(m *mirror) {
	m.markExpiring(pt.expiring)
	for _, rm := range pt.minutes {
		rm.r.expMinute = rm.n
	}
}

// checkpointParts splits the pending increments into parts of at most
// size fields; a subject with more has a part of its own. There is always
// a last part, empty when nothing but ids or rules is written.
func (s *Applier) checkpointParts(group string, partition int, hr *Headroom, nowSec int64, size int) ([]ckptPart, error) {
	slack := int64(s.slack / time.Second)
	parts := []ckptPart{{}}
	p := hr.wb.pending
	var one []any
	var expiring []uint32
	var bk bucketKeys
	slot := s.keys.Slot(partition)
	for i := range p.subs.len() {
		key := p.subs.key(i)
		if _, ok := window.ParseField(string(key)); !ok {
			return nil, fmt.Errorf("checkpoint group=%s partition=%d: pending subject %q is not a field", group, partition, key)
		}
		bk.subject(slot, key)
		d := p.subs.at(i)
		r := hr.t.rooms.get(key) // the rooms' key is the field too
		one, expiring = one[:0], expiring[:0]
		var minute uint32 // the minute this subject's fields set the expiry of
		p.each(d, func(f bucketField, n int64) {
			ttl := max((f.id.n+1)*f.id.span()+d.maxw+slack-nowSec, 1)
			var bi uint32
			if r != nil {
				bi = hr.mir.find(r, f.id)
			}
			switch {
			case bi != 0:
				var mark bool
				if ttl, mark = ckptTTL(hr.mir, bi, ttl); mark {
					expiring = append(expiring, bi)
				}
			case r != nil && f.id.level == 's':
				var mark bool
				if ttl, mark = roomTTL(r, minute, f.id.n, ttl); mark {
					minute = uint32(f.id.n)
				}
			}
			one = append(one, bk.key(f.id.level, f.id.n), f.field, n, ttl)
		})
		if len(one) == 0 {
			continue
		}
		cur := &parts[len(parts)-1]
		if len(cur.fields) > 0 && (len(cur.fields)+len(one))/4 > size {
			parts = append(parts, ckptPart{})
			cur = &parts[len(parts)-1]
		}
		cur.fields = append(cur.fields, one...)
		cur.subs = append(cur.subs, string(key))
		cur.expiring = append(cur.expiring, expiring...)
		if minute != 0 {
			cur.minutes = append(cur.minutes, roomMinute{r, minute})
		}
	}
	return parts, nil
}

// expiryKnownFor is how long a hash whose expiry this owner set must have
// left for a checkpoint to skip setting it again: a hash whose time is
// nearly up may have ended (clocks, a late event), and HINCRBY would make
// it again with none.
const expiryKnownFor = 60

// ckptTTL is the expiry a checkpoint sends with a field of the hash whose
// copy is block bi (0: none held), ttl seconds from now, as
// fg_ckpt_fields reads it: 0 to leave the hash's expiry as it is, a
// negative one to set it whether the field is new or not, a positive one
// to set it when the field is new. Setting it costs Redis a command per
// field; a hash of seconds gets up to 60 new fields. So an owner sets it
// once per copy it holds (mark: remember it once written, the copy's
// expiring), and as before with every new field of a hash it holds no copy
// of.
func ckptTTL(m *mirror, bi uint32, ttl int64) (out int64, mark bool) {
	if bi == 0 {
		return ttl, false
	}
	if m.t.blocks.At(int(bi-1)).expiring && ttl > expiryKnownFor {
		return 0, false
	}
	return -ttl, true
}

// roomTTL is ckptTTL for a field of a hash of seconds, minute n, of a
// subject with room r and no copy of it: the hash gets up to 60 new
// fields, each of which would set its expiry again. The room remembers
// the minute whose hash a written part set it for (mark); marked is the
// one this checkpoint already sets it for, in an earlier field.
func roomTTL(r *room, marked uint32, n, ttl int64) (out int64, mark bool) {
	if n <= 0 || n > math.MaxUint32 {
		return ttl, false
	}
	if (r.expMinute == uint32(n) || marked == uint32(n)) && ttl > expiryKnownFor {
		return 0, false
	}
	return -ttl, true
}

// markExpiring remembers the copies whose hashes' expiry a written part set.
func (m *mirror) markExpiring(blocks []uint32) {
	for _, bi := range blocks {
		m.t.blocks.At(int(bi - 1)).expiring = true
	}
}

// writePart writes part i of a checkpoint ahead of its last run, marked
// with the offset the increments run to (checkpoint_part.lua), which also
// moves D there. The mark's field is unique to this run: an owner that
// resumed after a failed checkpoint may write a part at the same offset
// again, and must not overwrite the mark of the first.
func (s *Applier) writePart(ctx context.Context, group, topic string, partition int, hr *Headroom, expect string, i int, pt ckptPart) error {
	wb := hr.wb
	mark, err := json.Marshal(pt.subs)
	if err != nil {
		return fmt.Errorf("checkpoint group=%s partition=%d, part %d: %w", group, partition, i, err)
	}
	field := strconv.FormatInt(wb.at, 10) + "/" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.Itoa(i)
	args := make([]any, 0, 7+len(pt.fields))
	args = append(args, expect, wb.at, hr.seq, max(hr.next, -1), field, string(mark), len(pt.fields)/4)
	args = append(args, pt.fields...)
	keys := []string{s.keys.Checkpoint(group, topic, partition), s.keys.Offset(group, topic, partition),
		s.keys.Seq(partition), s.keys.CheckpointMarks(group, topic, partition)}
	start := time.Now()
	out, err := checkpointPartScript.Run(ctx, s.rdb, keys, args...).Slice()
	s.st.Observe("checkpoint", start)
	if err != nil {
		return fmt.Errorf("checkpoint group=%s partition=%d offset=%d, part %d: %w", group, partition, wb.at, i, err)
	}
	if replyInt(out, 0) != checkpointWritten {
		return fmt.Errorf("part %d: %w", i, checkpointRefused(group, partition, out, expect, hr))
	}
	pt.marked(hr.mir)
	hr.next = max(hr.next, wb.at)
	return nil
}

func replyAny(v []any, i int) any {
	if i >= len(v) {
		return nil
	}
	return v[i]
}

// applyWriteBack is Apply for a write-back owner: the records before the
// decisions offset D are counted only (a new owner's replay), the rest as
// Apply says, the window-only subjects' increments kept in hr.
func (s *Applier) applyWriteBack(ctx context.Context, group string, b consume.Batch, set *rules.Set, now time.Time, hr *Headroom) (ApplyResult, error) {
	if hr.wb == nil {
		// Not resumed, or forgotten: resume from Redis's checkpoint.
		if err := s.rewind(ctx, group, b, hr, errors.New("write-back memory resumed")); err != nil {
			return ApplyResult{}, err
		}
	}
	if err := s.writeInherited(ctx, group, b.Topic, b.Partition, hr, now); err != nil {
		return ApplyResult{}, s.fenced(ctx, group, b, hr, err)
	}
	wb := hr.wb
	// Redis holds no offset of the partition: never applied, or Redis lost
	// its data.
	missing := wb.at < 0
	if missing && hr.held {
		hr.drop()
		return ApplyResult{}, fmt.Errorf("apply batch partition=%d offsets=%d-%d: %w", b.Partition, b.First, b.Last, errSlotLost)
	}
	if missing { // a partition never applied starts with this batch
		wb.at, wb.c, wb.replayTo = b.First, b.First, -1
	}
	if wb.rules == nil {
		wb.rules = set // none kept with C: nothing to replay under others
	}
	if !wb.cKept {
		// Store C before D moves past it: a slot with D and no C was
		// written through, everything before D in Redis — which memory's
		// counts are not.
		if _, err := s.checkpoint(ctx, group, b.Topic, b.Partition, hr, set, now); err != nil {
			return ApplyResult{}, s.fenced(ctx, group, b, hr, err)
		}
	}
	res := ApplyResult{OffsetMissing: missing}
	if b.Last < wb.at {
		return ApplyResult{Duplicate: true}, nil
	}
	if b.First < wb.at {
		kept := consume.TrimBatch(b, wb.at)
		res.Trimmed = len(b.Records) - len(kept.Records)
		b = kept
	}
	if b.First < wb.replayTo {
		rest, more, err := s.replayHead(ctx, b, now, hr, &res)
		if err != nil || !more {
			return res, err
		}
		b = rest
	}
	if !sameRules(wb.rules, set) {
		// The rules say which subjects memory counts and which the script
		// does: no replay may cross a change of them, so C moves to it
		// and keeps the new ones.
		if _, err := s.checkpoint(ctx, group, b.Topic, b.Partition, hr, set, now); err != nil {
			return res, s.fenced(ctx, group, b, hr, err)
		}
		wb.written = nil // it names the old rules' limits
	}
	wb.rules = set
	res.InMemory = true
	for _, c := range s.split(b) {
		r, err := s.applyChunk(ctx, group, c, set, now, hr)
		res.add(r)
		res.InMemory = res.InMemory && r.InMemory
		if err != nil {
			return res, s.fenced(ctx, group, c, hr, err)
		}
		wb.at = c.Last + 1
	}
	return res, nil
}

// replayHead counts b's records before the decisions offset D only, as
// a new owner's replay, and returns the rest of b (more: some left).
func (s *Applier) replayHead(ctx context.Context, b consume.Batch, now time.Time, hr *Headroom, res *ApplyResult) (rest consume.Batch, more bool, err error) {
	cut := min(hr.wb.replayTo, b.Last+1)
	head := b
	head.Last = cut - 1
	head.Records = b.Records[:0:0]
	for _, r := range b.Records {
		if r.Offset < cut {
			head.Records = append(head.Records, r)
		}
	}
	// The rules the last owner counted these under, not the current ones:
	// they say which subjects the script has counted already.
	if err := s.replay(ctx, head, hr.wb.rules, now, hr, res); err != nil {
		return b, false, err
	}
	if b.Last < cut {
		return b, false, nil
	}
	return consume.TrimBatch(b, cut), true, nil
}

// sameRules tells whether two rule sets are one, or were parsed from the
// same text.
func sameRules(a, b *rules.Set) bool {
	return a == b || a.Source() != nil && bytes.Equal(a.Source(), b.Source())
}

// fenced turns a refused write into a rewind from Redis's checkpoint; other
// errors pass (the batch is retried, memory unchanged).
func (s *Applier) fenced(ctx context.Context, group string, b consume.Batch, hr *Headroom, err error) error {
	if !errors.Is(err, errFenced) {
		return err
	}
	if rerr := s.rewind(ctx, group, b, hr, err); rerr != nil {
		return rerr
	}
	// Redis's checkpoint is this very batch's start: read it again from
	// there all the same, memory now empty.
	return &consume.RewindError{Topic: b.Topic, Partition: b.Partition, Next: b.First, First: b.First, Reason: err.Error()}
}

// decideInMemory tells whether a write-back batch is done without the
// apply script: every subject's increments kept in memory and no verdict
// with anything to write. It marks the subjects whose verdicts write.
func (s *Applier) decideInMemory(pl *profiles, order []*pendingSubject, hr *Headroom, h holdAt) (done bool, err error) {
	done = true
	for _, ps := range order {
		if !ps.memory {
			done = false // counted, or evaluated, by the script
			continue
		}
		if ps.verdict == nil {
			if ps.plan != evalNone {
				// Its buckets could not all be loaded: the script must not
				// evaluate it from Redis, which lacks what memory holds.
				return false, fmt.Errorf("evaluate %s: its bucket copies could not be loaded", window.Field(ps.sub))
			}
			continue
		}
		switch {
		case hr.quiet(ps.sub, ps.verdict):
			hr.wb.undefer(hr, ps.sub)
		case hr.wb.deferState(hr, ps.sub, ps.verdict, &pl.list[ps.profile], h):
			ps.deferred = true
		default:
			ps.writes = true
			hr.wb.undefer(hr, ps.sub)
		}
		done = done && !ps.writes
	}
	return done, nil
}

// commit keeps the batch's increments of its memory subjects. When it
// cannot, it drops hr's memory: the next batch reads the partition again
// from the checkpoint.
func (hr *Headroom) commit(pl *profiles, order []*pendingSubject, nowSec int64) error {
	for _, ps := range order {
		if !ps.memory {
			continue
		}
		err := hr.wb.add(ps.sub, pl.list[ps.profile].maxw, ps.sums)
		for _, id := range ps.ids {
			if err == nil {
				err = hr.wb.addID(id, nowSec)
			}
		}
		if err != nil {
			hr.drop()
			return err
		}
	}
	return nil
}

// decideBody writes a write-back batch's verdicts (see its header).
//
//go:embed decide.lua
var decideBody string

var decideScript = redis.NewScript("#!lua\n" + window.LuaLib + decideBody)

// onlyMemory tells whether every subject of a batch is counted in memory:
// its verdicts are then written by decide.lua, which parses no rules and
// counts nothing.
func onlyMemory(order []*pendingSubject) bool {
	for _, ps := range order {
		if !ps.memory {
			return false
		}
	}
	return true
}

// runDecide runs decide.lua with args; a refusal (the slot's D or change
// sequence is not hr's) is errFenced.
func (s *Applier) runDecide(ctx context.Context, offkey string, args []any, hr *Headroom) ([]any, error) {
	start := time.Now()
	out, err := decideScript.Run(ctx, s.rdb, []string{offkey}, args...).Slice()
	s.st.Observe("decide", start)
	if err != nil {
		return nil, err
	}
	if replyInt(out, 0) != replyApplied || len(out) < 8 {
		return nil, fmt.Errorf("the slot's offset is %d, this owner's %d: %w", replyInt(out, 1), hr.next, errFenced)
	}
	return out, nil
}

// decide writes the verdicts of a batch whose subjects are all counted in
// memory, and moves D to the batch's end; refused (another writer, an
// operator's action), it returns errFenced.
func (s *Applier) decide(ctx context.Context, offkey string, b consume.Batch, pl *profiles, order []*pendingSubject, hr *Headroom, now time.Time, res *ApplyResult) error {
	var sent []*pendingSubject
	var fields []string
	wb := hr.wb
	d := b.Last + 1
	if wb.pinned {
		d = wb.heldFrom // decisions held back: evaluated again after a crash
	}
	args := []any{s.keys.Slot(b.Partition), hr.next, d, now.UnixMilli(), s.keep, s.st.MaxLog(), hr.seq, 0, "0"}
	for _, ps := range order {
		if !ps.writes {
			continue
		}
		f := window.Field(ps.sub)
		sent, fields = append(sent, ps), append(fields, f)
		args = decideArgs(args, f, ps.verdict.state, ps.verdict.expires, ps.verdict.best, pl.list[ps.profile].limits)
	}
	args[7] = len(sent)
	out, err := s.runDecide(ctx, offkey, args, hr)
	if err != nil {
		hr.forget() // the copies hold the batch's increments, memory does not yet
		return fmt.Errorf("write decisions partition=%d offsets=%d-%d: %w", b.Partition, b.First, b.Last, err)
	}
	res.Evaluated, res.Mirrored = hr.learnVerdicts(order)
	res.Changes = replyInt(out, 5)
	res.Decisions = pl.decisions(replyInts(out[3]), sent)
	res.Extended = pl.decisions(replyInts(out[6]), sent)
	hr.next, hr.seq = d, replyInt(out, 7)
	if s.hold > 0 {
		for i, w := range recordsWritten(out, len(sent)) {
			v := sent[i].verdict
			wb.wrote(fields[i], blockingOf(v.near), candidates(v.best), w, floorDiv(now.UnixMilli(), 1000), v.state)
		}
	}
	return hr.commit(pl, order, floorDiv(now.UnixMilli(), 1000))
}
