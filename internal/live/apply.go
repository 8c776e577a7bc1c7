package live

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"

	"github.com/redis/go-redis/v9"
)

// ApplierConfig configures an Applier.
type ApplierConfig struct {
	// MaxSubjects caps the distinct subjects of one apply script run. A
	// batch with more is applied as several runs over consecutive offset
	// ranges, each atomic with its own offset, so that no script blocks
	// Redis for long. Default 1000.
	MaxSubjects int
	// Dedup, when positive, is the horizon within which an event id already
	// counted in a partition is skipped (a producer's retry): the ids are
	// kept in the partition's slot and checked in the apply script. Zero
	// counts every event (the default).
	Dedup time.Duration
	// KeepRecords keeps deny and shadow records this long past their until.
	// Default 0: they expire exactly at until, so that a record's presence
	// alone means "deny" to every reader. Replays on event time (package
	// backtest) set it: their clock runs at another pace than Redis's, which
	// would otherwise drop records early; the apply script, their only
	// reader there, treats a record whose until has passed as none.
	KeepRecords time.Duration
	// WriteBack keeps the bucket counts of window-only subjects in the
	// memory of the partition's owner (its Headroom) and writes them to
	// Redis only at Checkpoint (writeback.go), with the ids of their events
	// when Dedup is set.
	WriteBack bool
	// CheckpointPart is the most bucket fields one checkpoint script run
	// writes. A larger checkpoint goes in several runs, each marking its
	// subjects for a replay (checkpoint_part.lua), so that no run holds
	// Redis — and every decision behind it — for long. It also bounds the
	// held-back states one run writes before a checkpoint (deferred.go).
	// Default 256.
	CheckpointPart int
	// HoldDecisions, with WriteBack, lets the owner hold back until its
	// next checkpoint a blocked subject's verdict that only extends what
	// it wrote — its limits blocked longer, its deny records extended —
	// while every retry time written lies at least this far ahead
	// (deferred.go). It must exceed the checkpoint interval by what a
	// checkpoint may take: the aggregator sets twice the interval plus 5s.
	// 0 (the default) writes such verdicts at once.
	HoldDecisions time.Duration
	// RefreshDecisions, with HoldDecisions, lets a checkpoint carry a
	// held-back decision past it (carried.go) while the state written for
	// its subject is younger than this: a denied subject's retry time and
	// counts are then up to this old (earlier, never later) instead of a
	// checkpoint interval. 0 (the default) writes them at every checkpoint.
	RefreshDecisions time.Duration
	// OwnerTakes, with WriteBack, counts the subjects of strict rules in
	// the owner's memory like any other (they are mirrored): the owner
	// answers their takes (Sink.TakeQueued, stage B), and the limiter's
	// take script, which reads Redis's buckets, must not run beside it.
	// Switch it only across a clean stop (a final checkpoint, C = D): a
	// replay of C..D under the other mode would count strict subjects
	// twice or not at all.
	OwnerTakes bool
	// Logger receives what the Applier notices on its own. Default
	// slog.Default().
	Logger *slog.Logger
}

// Applier writes batches of the events topic into the slots of a
// window.Store: bucket increments, the partition's offset, deny records,
// decision state and change entries, one script run per batch (or per
// MaxSubjects subjects of it). The live Sink, backtest's replays and
// recovery's rebuild share it. Safe for concurrent use; one goroutine per
// partition (its Headroom is not).
type Applier struct {
	st     *window.Store
	rdb    window.Redis
	keys   window.Keys
	slack  time.Duration
	maxSub int
	dedup  int64 // seconds; 0 off
	keep   int64 // ms deny records outlive their until
	wb     bool
	part   int   // bucket fields per checkpoint script run
	hold   int64 // seconds; 0 off (ApplierConfig.HoldDecisions)
	// refresh: seconds; 0 off (ApplierConfig.RefreshDecisions)
	refresh    int64
	ownerTakes bool
	log        *slog.Logger
}

// The scripts are immutable; redis.Script only caches their SHA. The
// shebang makes Redis refuse a writing script up front when it is out of
// memory, instead of failing half-way.
var (
	applyScript = redis.NewScript("#!lua\n" + window.LuaLib + maxDistinctLua + applyBody)
	seenScript  = redis.NewScript("#!lua flags=no-writes\n" + seenBody)
)

// The apply script's reply codes, the first value of its reply: apply.lua
// names them alike at its top.
const (
	replyApplied    = 0 // APPLIED: the batch is written
	replyHeld       = 1 // HELD: the slot holds the whole batch already
	replyTrim       = 2 // TRIM: only its tail is new; the caller trims and retries
	replyDedupRaced = 3 // DEDUP_RACED: an id was counted since the caller looked
	replyRewind     = 4 // REWIND: the batch starts after the stored offset
	replyStale      = 5 // STALE: the caller's verdicts or copies are stale
	replyLost       = 6 // LOST: no offset where the caller applied before
)

// errSlotLost: the partition's slot holds no offset although this
// Headroom saw one there, so Redis lost the slot (a restart without
// persistence, a failover before anything was replicated) and with it
// every count. Nothing of the batch is written: the sink has the partition
// counted again from the log (consume.Recounter).
var errSlotLost = errors.New("the partition's offset is missing from Redis although this owner had stored one: Redis lost the slot")

// seenBody reads the scores of many ids in chunks: Lua's unpack fails
// past a few thousand values, and a backlog's batch holds more.
//
//go:embed seen.lua
var seenBody string

// maxDistinctLua gives a script the cap on a distinct set's values.
var maxDistinctLua = "local MAXDISTINCT = " + strconv.Itoa(rules.MaxDistinct) + "\n"

// NewApplier returns an Applier writing into st's slots.
func NewApplier(st *window.Store, cfg ApplierConfig) (*Applier, error) {
	switch {
	case st == nil:
		return nil, errors.New("live applier: nil store")
	case cfg.MaxSubjects < 0:
		return nil, fmt.Errorf("live applier: max subjects %d is negative", cfg.MaxSubjects)
	case cfg.HoldDecisions < 0 || (cfg.HoldDecisions > 0 && !cfg.WriteBack):
		return nil, fmt.Errorf("live applier: hold decisions %s: want 0, or a positive duration with write-back", cfg.HoldDecisions)
	case cfg.RefreshDecisions < 0 || (cfg.RefreshDecisions > 0 && cfg.HoldDecisions == 0):
		return nil, fmt.Errorf("live applier: refresh decisions %s: want 0, or a positive duration with hold decisions", cfg.RefreshDecisions)
	case cfg.CheckpointPart < 0:
		return nil, fmt.Errorf("live applier: checkpoint part of %d fields is negative", cfg.CheckpointPart)
	case cfg.OwnerTakes && !cfg.WriteBack:
		return nil, errors.New("live applier: owner takes answer from write-back memory: they need write-back")
	case cfg.KeepRecords < 0:
		return nil, fmt.Errorf("live applier: keep records %s is negative", cfg.KeepRecords)
	case cfg.Dedup < 0 || (cfg.Dedup > 0 && cfg.Dedup < time.Second):
		return nil, fmt.Errorf("live applier: dedup horizon %s: want 0 (off) or at least 1s", cfg.Dedup)
	}
	if cfg.MaxSubjects == 0 {
		cfg.MaxSubjects = 1000
	}
	if cfg.CheckpointPart == 0 {
		cfg.CheckpointPart = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Applier{
		st:     st,
		rdb:    st.Redis(),
		keys:   st.Keys(),
		slack:  st.Slack(),
		maxSub: cfg.MaxSubjects,
		dedup:  int64(cfg.Dedup / time.Second),
		keep:   cfg.KeepRecords.Milliseconds(),
		wb:     cfg.WriteBack,
		part:   cfg.CheckpointPart,
		hold:   int64((cfg.HoldDecisions + time.Second - 1) / time.Second),
		// rounded down: a state is not kept past it
		refresh:    int64(cfg.RefreshDecisions / time.Second),
		ownerTakes: cfg.OwnerTakes,
		log:        cfg.Logger,
	}, nil
}

// WriteBack tells whether the Applier keeps counts in its owner's memory.
func (s *Applier) WriteBack() bool { return s.wb }

// OwnerTakes tells whether the owner answers strict takes
// (ApplierConfig.OwnerTakes).
func (s *Applier) OwnerTakes() bool { return s.ownerTakes }

// Store returns the store the Applier writes into.
func (s *Applier) Store() *window.Store { return s.st }

// Keys returns the key layout of the store's prefix.
func (s *Applier) Keys() window.Keys { return s.keys }

// LoadScripts loads the Applier's scripts into Redis (every primary of a
// cluster), so that the first batch after a start runs them by their SHA.
// The store's own scripts load with window.Store.LoadScripts.
func (s *Applier) LoadScripts(ctx context.Context) error {
	for _, sc := range []*redis.Script{applyScript, seenScript, pruneScript, checkpointScript, checkpointPartScript, decideScript, heldScript} {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("load apply scripts: %w", err)
		}
	}
	return nil
}

// ApplyResult tells what one Apply did.
type ApplyResult struct {
	// Duplicate is true when the store already held the whole batch.
	Duplicate bool
	// Trimmed counts records skipped because the store already held their
	// offsets (a stale owner's batch overlapping the new owner's).
	Trimmed int
	// Events counted into buckets, and events skipped: older than every
	// window of their rules, counted already by the limiter (strict mode),
	// matching no rule, or counted already under their id (Dedup).
	Applied, Old, CountedByLimiter, NoRule, Duplicates int
	// Misplaced counts events on another partition than their key's
	// (murmur2 of "kind:subject"): they are counted in this partition's
	// slot, where a strict take for their subject does not look.
	Misplaced int
	// Subjects touched, and of them those evaluated against their limits
	// (the others were too far from every limit to have changed).
	Subjects, Evaluated int
	// Mirrored counts the evaluated subjects whose windows were evaluated in
	// Go from the partition's copies of their buckets (mirror.go) rather
	// than by the script.
	Mirrored int
	// Changes is the sequence number of the change entry the batch wrote to
	// its partition's stream (0: none).
	Changes int64
	// Decisions are the new deny and shadow decisions.
	Decisions []window.DecisionMessage
	// OffsetMissing is true when the slot held no offset for the partition
	// before the batch: a partition never applied, or a Redis that lost its
	// data (a restart without persistence, a flush). The caller, which
	// knows whether it had progress, tells the two apart.
	OffsetMissing bool
	// InMemory is true when a write-back batch wrote nothing to Redis: its
	// subjects counted in memory, no verdict with anything to write.
	InMemory bool
	// Replayed counts, in write-back, the records a new owner read again
	// between the checkpoint and the decisions offset (counted, not
	// evaluated); ResetSkipped those of them an operator's reset dropped.
	Replayed, ResetSkipped int
	// PartSkipped counts the replayed records a part of an unfinished
	// checkpoint had written to Redis already (checkpoint_part.lua).
	PartSkipped int
	// Extended are the deny and shadow records the batch wrote over a live
	// record of the same rule and window, with a later Until: no new
	// decision (nothing is published), but the subject stays denied longer.
	// Replays read them to measure deny time.
	Extended []window.DecisionMessage
}

func (r *ApplyResult) add(o ApplyResult) {
	r.Duplicate = r.Duplicate && o.Duplicate
	r.Trimmed += o.Trimmed
	r.Applied += o.Applied
	r.Old += o.Old
	r.CountedByLimiter += o.CountedByLimiter
	r.NoRule += o.NoRule
	r.Duplicates += o.Duplicates
	r.Misplaced += o.Misplaced
	r.Subjects += o.Subjects
	r.Evaluated += o.Evaluated
	r.Mirrored += o.Mirrored
	r.Replayed += o.Replayed
	r.ResetSkipped += o.ResetSkipped
	r.PartSkipped += o.PartSkipped
	r.Changes = max(r.Changes, o.Changes)
	r.OffsetMissing = r.OffsetMissing || o.OffsetMissing
	r.Decisions = append(r.Decisions, o.Decisions...)
	r.Extended = append(r.Extended, o.Extended...)
}

// Apply applies a batch of a partition for a consumer group at time now:
// each record's event is added to its subject's buckets by event time
// (coalesced per subject and second), the partition's next offset is
// stored, and the touched subjects that may have moved relative to their
// limits are evaluated against the rules in set — their deny records, their
// state and a change entry written — all in one script run in the
// partition's slot. A batch the store already holds changes nothing; a
// batch that starts after the stored offset changes nothing either and
// returns *consume.RewindError: the slot lost writes it had acknowledged
// (a failover), and the partition must be applied again from the stored
// offset.
//
// hr remembers how far each subject stood from its limits, so that only
// subjects a batch can have brought near a limit are evaluated; nil
// evaluates every touched subject. Use one Headroom per partition, from one
// goroutine.
//
// Events older than the longest window of their rules, events that match
// no rule, and Counted events (the limiter's strict mode counted them) are
// not added; subjects with Counted events are still evaluated.
//
// A batch with more than MaxSubjects subjects is applied in several script
// runs. When one fails, the result holds what the runs before it did, along
// with the error. A failed run writes nothing (it undoes its own writes).
func (s *Applier) Apply(ctx context.Context, group string, b consume.Batch, set *rules.Set, now time.Time, hr *Headroom) (ApplyResult, error) {
	// hr's tables are freed when it is collected: keep it until the pointers
	// into them are done with, whatever the caller holds.
	defer runtime.KeepAlive(hr)
	var res ApplyResult
	var err error
	if s.wb && hr != nil {
		res, err = s.applyWriteBack(ctx, group, b, set, now, hr)
	} else {
		res, err = s.applyThrough(ctx, group, b, set, now, hr)
	}
	if err == nil && hr != nil {
		hr.held = true
	}
	return res, err
}

// applyThrough is Apply written through: every batch by the apply script.
func (s *Applier) applyThrough(ctx context.Context, group string, b consume.Batch, set *rules.Set, now time.Time, hr *Headroom) (ApplyResult, error) {
	total := ApplyResult{Duplicate: true}
	for _, c := range s.split(b) {
		res, err := s.applyChunk(ctx, group, c, set, now, hr)
		total.add(res)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// split cuts b into batches of consecutive offsets with at most maxSub
// distinct subjects each. Together they cover b's offsets exactly.
func (s *Applier) split(b consume.Batch) []consume.Batch {
	if len(b.Records) <= s.maxSub {
		// No more subjects than records: whole, without hashing each
		// event's subject (a live stream's batches are mostly this small).
		return []consume.Batch{b}
	}
	var out []consume.Batch
	cur := consume.Batch{Topic: b.Topic, Partition: b.Partition, First: b.First}
	seen := map[window.Subject]struct{}{}
	start := 0
	for i := range b.Records {
		e := &b.Records[i].Event
		sub := window.Subject{Action: e.Action, Kind: e.Kind, Subject: e.Subject}
		if _, ok := seen[sub]; ok {
			continue
		}
		if len(seen) == s.maxSub {
			cur.Records = b.Records[start:i]
			cur.Last = b.Records[i].Offset - 1
			out = append(out, cur)
			cur = consume.Batch{Topic: b.Topic, Partition: b.Partition, First: b.Records[i].Offset}
			start = i
			clear(seen)
		}
		seen[sub] = struct{}{}
	}
	cur.Records = b.Records[start:]
	cur.Last = b.Last
	return append(out, cur)
}

func (s *Applier) applyChunk(ctx context.Context, group string, b consume.Batch, set *rules.Set, now time.Time, hr *Headroom) (ApplyResult, error) {
	trimmed := 0
	useMirror := hr != nil
	for {
		res, trimTo, err := s.applyOnce(ctx, group, b, set, now, hr, useMirror)
		res.Trimmed = trimmed
		if errors.Is(err, errDedupRaced) {
			continue // another writer counted one of the ids: look again
		}
		if errors.Is(err, errMirrorStale) {
			// Another writer moved the partition or an operator acted: the
			// copies are gone; this batch is evaluated by the script.
			useMirror = false
			continue
		}
		if err != nil || trimTo < 0 {
			return res, err
		}
		// The stored offset lies inside the batch (a stale owner raced the
		// new one): only the tail is new, and what this owner remembers of
		// its subjects is stale. trimTo > b.First, so this ends.
		hr.forget()
		kept := consume.TrimBatch(b, trimTo)
		trimmed += len(b.Records) - len(kept.Records)
		b = kept
	}
}

// gather groups a batch's records by subject, in first-seen order, with
// each subject's limit profile; the apply path and a write-back replay
// share it.
type gather struct {
	set      *rules.Set
	nowSec   int64
	pl       *profiles
	subjects map[window.Subject]*pendingSubject
	order    []*pendingSubject
}

// newGather is ready for b's subjects: no more than its records, nor than
// split lets a batch hold. A map grown from empty as they came was half
// the cost of gathering a small batch.
func (s *Applier) newGather(set *rules.Set, nowSec int64, b consume.Batch) *gather {
	subjects := min(len(b.Records), s.maxSub)
	return &gather{set: set, nowSec: nowSec, pl: newProfiles(set, s.ownerTakes), subjects: make(map[window.Subject]*pendingSubject, subjects)}
}

// subject returns the pending subject ev counts for and its second, fresh
// when ev is its first event of the batch; nil (counted in res) when no
// rule matches ev or it is older than every window of its rules.
func (g *gather) subject(ev *event.Event, res *ApplyResult) (ps *pendingSubject, sec int64, fresh bool) {
	maxw := int64(g.set.MaxWindowFor(ev.Action, ev.Kind) / time.Second)
	if maxw == 0 {
		res.NoRule++
		return nil, 0, false
	}
	sec = floorDiv(ev.TS.UnixMilli(), 1000)
	if sec <= g.nowSec-maxw {
		// Too old for every window, and for every bucket too: a bucket
		// refills within maxw, so the event's token is back already.
		res.Old++
		return nil, 0, false
	}
	// counted as the limiter looks it up: an IPv6 address by its prefix
	// (rules.Set.Subject)
	sub := window.Subject{Action: ev.Action, Kind: ev.Kind, Subject: g.set.Subject(ev.Kind, ev.Subject)}
	if ps = g.subjects[sub]; ps != nil {
		return ps, sec, false
	}
	ps = &pendingSubject{sub: sub, eval: g.nowSec}
	ps.profile = g.pl.of(sub, maxw)
	g.subjects[sub] = ps
	g.order = append(g.order, ps)
	return ps, sec, true
}

// pendingSubject is one subject of a batch as sent to the script.
type pendingSubject struct {
	sub     window.Subject
	profile int
	eval    int64 // evaluation second: max of now and its latest event
	latest  int64 // its latest event, Unix ms
	added   int64 // events of the batch, counted or not
	incs    secCounts
	sums    []bucketSum       // incs added up per bucket hash field, at every level (sumLevels)
	seen    map[seenKey]int64 // distinct values of the batch -> latest second
	bev     []bucketEvent     // events for its buckets, in arrival order
	counted bool              // some of its events were counted by a strict take
	ids     []string          // ids of the events it counts (Dedup)
	plan    string            // which limits to evaluate (Headroom.needs)
	verdict *verdict          // evaluated from the partition's copies (mirror.go)
	// memory: write-back counts its increments in the owner's memory;
	// writes: its verdict has something to write (decideInMemory);
	// deferred: its state waits for the checkpoint (deferred.go).
	memory, writes, deferred bool
}

type seenKey struct{ kind, value string }

type bucketEvent struct{ us, n int64 }

// errDedupRaced: an event id the batch was to count was counted by another
// writer of the partition since the batch looked.
var errDedupRaced = errors.New("dedup raced")

// errMirrorStale: the partition's copies of the buckets (mirror.go) are not
// what the slot holds; they are forgotten.
var errMirrorStale = errors.New("bucket copies stale")

// applyOnce returns trimTo >= 0 when the store holds the batch's head.
func (s *Applier) applyOnce(ctx context.Context, group string, b consume.Batch, set *rules.Set, now time.Time, hr *Headroom, useMirror bool) (ApplyResult, int64, error) {
	nowSec := floorDiv(now.UnixMilli(), 1000)
	g, res, err := s.gatherBatch(ctx, b, set, nowSec, hr)
	if err != nil {
		return res, -1, err
	}
	pl, order := g.pl, g.order
	wb := s.planBatch(set, pl, order, hr, nowSec)
	offkey := s.keys.Offset(group, b.Topic, b.Partition)
	if useMirror || wb {
		if err := s.evalMirrored(ctx, offkey, group, b, pl, order, hr, nowSec); err != nil {
			// The copies hold the batch's increments, which Redis does not.
			hr.forget()
			return res, -1, err
		}
	}
	if wb {
		done, err := s.settleWriteBack(ctx, group, offkey, b, pl, order, hr, now, &res)
		if err != nil || done {
			return res, -1, err
		}
	}
	return s.runApply(ctx, group, offkey, b, now, pl, order, hr, wb, res)
}

// gatherBatch groups b's records by subject: the increments of those it
// counts, the events a strict take counted and the repeats it skips.
func (s *Applier) gatherBatch(ctx context.Context, b consume.Batch, set *rules.Set, nowSec int64, hr *Headroom) (*gather, ApplyResult, error) {
	var res ApplyResult
	var wbm *writeBack
	if hr != nil {
		wbm = hr.wb
	}
	dups, err := s.duplicates(ctx, b, set, nowSec, wbm)
	if err != nil {
		return nil, res, err
	}
	g := s.newGather(set, nowSec, b)
	parts := s.st.Partitions()
	for i := range b.Records {
		r := &b.Records[i]
		ev := &r.Event
		ps, sec, fresh := g.subject(ev, &res)
		if ps == nil {
			continue
		}
		if fresh && parts > 0 && window.Partition(ps.sub, parts) != b.Partition {
			res.Misplaced++
		}
		ps.eval = max(ps.eval, sec)
		ps.latest = max(ps.latest, ev.TS.UnixMilli())
		n := max(ev.N, 1)
		ps.added += n
		if r.Counted {
			ps.counted = true
			res.CountedByLimiter++
			continue
		}
		if s.dedup > 0 {
			if dups[i] {
				res.Duplicates++
				continue
			}
			ps.ids = append(ps.ids, ev.ID)
		}
		ps.incs.add(sec, n)
		g.pl.observe(ps, ev, sec)
		res.Applied++
	}
	res.Subjects = len(g.order)
	sumLevels(g.pl, g.order)
	return g, res, nil
}

// planBatch decides, per subject, which limits to evaluate and whether
// memory counts it; it tells whether the batch is a write-back owner's.
func (s *Applier) planBatch(set *rules.Set, pl *profiles, order []*pendingSubject, hr *Headroom, nowSec int64) (wb bool) {
	hr.use(set, len(order))
	wb = s.wb && hr != nil && hr.wb != nil
	for _, ps := range order {
		pr := &pl.list[ps.profile]
		ps.plan = hr.needs(ps.sub, len(pr.limits)+len(pr.buckets), ps.added, ps.eval, nowSec)
		ps.memory = wb && pr.mirrored
	}
	return wb
}

// settleWriteBack finishes a write-back batch without the apply script
// when it can (done): every subject counted in memory, its verdicts held
// back or written by decide.lua. Otherwise the held-back decisions go
// first and the script runs.
func (s *Applier) settleWriteBack(ctx context.Context, group, offkey string, b consume.Batch, pl *profiles, order []*pendingSubject, hr *Headroom, now time.Time, res *ApplyResult) (done bool, err error) {
	nowSec := floorDiv(now.UnixMilli(), 1000)
	only := onlyMemory(order)
	h := holdAt{now: nowSec, from: b.First}
	switch {
	case s.hold > 0 && only:
		h.deadline = nowSec + s.hold
	case !only && hr.wb.pinned:
		// The script moves D past this batch, which therefore holds no
		// decision back, and the decisions held back before it go first
		// (but those carried past a checkpoint: D does not hold them).
		if err := s.writeDeferred(ctx, group, b.Topic, b.Partition, hr, now, keepCarried, true); err != nil {
			return false, err
		}
	}
	done, err = s.decideInMemory(pl, order, hr, h)
	if err != nil || done {
		if err == nil {
			res.Evaluated, res.Mirrored = hr.learnVerdicts(order)
			err = hr.commit(pl, order, nowSec)
			res.InMemory = true
		}
		return true, err
	}
	if only {
		return true, s.decide(ctx, offkey, b, pl, order, hr, now, res)
	}
	for _, ps := range order {
		if ps.writes && hr.wb.written != nil {
			delete(hr.wb.written, window.Field(ps.sub)) // apply.lua's writes are not remembered
		}
	}
	return false, nil
}

// runApply runs the apply script over the batch, res being what gathering
// it found, and learns its reply.
func (s *Applier) runApply(ctx context.Context, group, offkey string, b consume.Batch, now time.Time, pl *profiles, order []*pendingSubject, hr *Headroom, wb bool, res ApplyResult) (ApplyResult, int64, error) {
	args, sent := s.applyArgs(b, now, pl, order, hr)
	// The ids of the subjects the script counts; a write-back owner keeps
	// its memory subjects' with their counts (commit).
	var ids []any
	for _, ps := range order {
		if !ps.memory {
			for _, id := range ps.ids {
				ids = append(ids, id)
			}
		}
	}
	args = append(append(args, s.dedup, len(ids)), ids...)
	start := time.Now()
	out, err := applyScript.Run(ctx, s.rdb, []string{offkey}, args...).Slice()
	s.st.Observe("apply", start)
	if err != nil {
		// Whether the script ran is unknown (a lost reply) or it wrote
		// nothing (it undoes its writes on error): report nothing of it.
		hr.forget()
		return ApplyResult{}, -1, fmt.Errorf("apply batch group=%s topic=%s partition=%d offsets=%d-%d: %w", group, b.Topic, b.Partition, b.First, b.Last, err)
	}
	status, prev := replyInt(out, 0), replyInt(out, 1)
	if status != replyApplied {
		// Nothing of the batch was written; the copies hold its increments.
		hr.forget()
		if wb {
			return ApplyResult{}, -1, fmt.Errorf("apply batch partition=%d offsets=%d-%d: the slot's offset is %d, this owner's %d (reply %d): %w",
				b.Partition, b.First, b.Last, prev, hr.next, status, errFenced)
		}
		return refusedApply(b, status, prev)
	}
	if len(out) < 6 {
		return res, -1, fmt.Errorf("apply batch partition=%d: short script reply %v", b.Partition, out)
	}
	res.OffsetMissing = prev < 0 // the script's prev is -1 when the offset key was missing
	res.Evaluated, res.Mirrored = hr.learn(out, b.Last+1, pl, order, sent)
	res.Changes = replyInt(out, 5)
	res.Decisions = pl.decisions(replyInts(out[3]), sent)
	if len(out) > 6 {
		res.Extended = pl.decisions(replyInts(out[6]), sent)
	}
	if wb {
		if err := hr.commit(pl, order, floorDiv(now.UnixMilli(), 1000)); err != nil {
			return res, -1, err
		}
	}
	return res, -1, nil
}

// refusedApply is what the apply script's refusal (status, with the
// slot's offset prev) means for a write-through batch.
func refusedApply(b consume.Batch, status, prev int64) (ApplyResult, int64, error) {
	switch status {
	case replyHeld:
		return ApplyResult{Duplicate: true}, -1, nil
	case replyTrim:
		return ApplyResult{}, prev, nil
	case replyDedupRaced:
		return ApplyResult{}, -1, errDedupRaced
	case replyRewind:
		return ApplyResult{}, -1, &consume.RewindError{Topic: b.Topic, Partition: b.Partition, Next: prev, First: b.First}
	case replyStale:
		return ApplyResult{}, -1, errMirrorStale
	case replyLost:
		return ApplyResult{}, -1, fmt.Errorf("apply batch partition=%d offsets=%d-%d: %w", b.Partition, b.First, b.Last, errSlotLost)
	}
	return ApplyResult{}, -1, fmt.Errorf("apply batch partition=%d offsets=%d-%d: unknown reply %d", b.Partition, b.First, b.Last, status)
}

// learn records in hr what an applied batch's reply says: the offset and
// change sequence the slot now holds, and the headroom of every subject
// evaluated, by the script (whose reply numbers the subjects sent to it)
// or from the copies. It returns how many were evaluated, and of them from
// the copies.
func (hr *Headroom) learn(out []any, next int64, pl *profiles, order, sent []*pendingSubject) (evaluated, mirrored int) {
	if replyInt(out, 2) == 1 {
		hr.forget() // another writer had moved the offset: the script evaluated all
	}
	// {subject index, headroom per limit and bucket}* of evaluated subjects
	hs := replyInts(out[4])
	for i := 0; i < len(hs); {
		if hs[i] < 1 || hs[i] > int64(len(sent)) {
			hr.forget() // a reply this code did not ask for: trust none of it
			break
		}
		ps := sent[hs[i]-1]
		pr := &pl.list[ps.profile]
		n := len(pr.limits) + len(pr.buckets)
		if i+1+n > len(hs) {
			hr.forget() // a reply this code did not ask for: trust none of it
			break
		}
		hr.set(ps.sub, hs[i+1:i+1+n], ps.eval)
		evaluated++
		i += 1 + n
	}
	e, m := hr.learnVerdicts(order)
	evaluated += e
	mirrored += m
	hr.stored(next)
	if hr != nil {
		hr.seq = -2 // unknown: no copies are used until it is
		if len(out) > 7 {
			hr.seq = replyInt(out, 7)
		}
	}
	return evaluated, mirrored
}

// duplicates marks, by record index, the events of b counted already under
// their id within the dedup horizon (one read of the partition's id set,
// and wb's ids counted into memory since the checkpoint), and the repeats
// of an id within b. Nil when dedup is off.
func (s *Applier) duplicates(ctx context.Context, b consume.Batch, set *rules.Set, nowSec int64, wb *writeBack) (map[int]bool, error) {
	if s.dedup == 0 {
		return nil, nil
	}
	dups := map[int]bool{}
	first := map[string]bool{}
	var ids []any
	var at []int
	for i := range b.Records {
		r := &b.Records[i]
		if r.Counted || set.MaxWindowFor(r.Event.Action, r.Event.Kind) == 0 {
			continue
		}
		if first[r.Event.ID] {
			dups[i] = true
			continue
		}
		first[r.Event.ID] = true
		if at, ok := wb.seenAt(r.Event.ID); ok && at > nowSec-s.dedup {
			dups[i] = true
			continue
		}
		ids = append(ids, r.Event.ID)
		at = append(at, i)
	}
	if len(ids) == 0 {
		return dups, nil
	}
	start := time.Now()
	scores, err := seenScript.RunRO(ctx, s.rdb, []string{s.keys.IDs(b.Partition)}, ids...).Slice()
	s.st.Observe("dedup", start)
	if err != nil {
		return nil, fmt.Errorf("read event ids partition=%d: %w", b.Partition, err)
	}
	for k, v := range scores {
		// Redis answers scores as strings in RESP2 and floats in RESP3.
		var sc float64
		switch x := v.(type) {
		case string:
			sc, _ = strconv.ParseFloat(x, 64)
		case float64:
			sc = x
		case int64:
			sc = float64(x)
		default:
			continue // not counted
		}
		if int64(sc) > nowSec-s.dedup {
			dups[at[k]] = true
		}
	}
	return dups, nil
}

// applyArgs builds the apply script's ARGV (see applyBody) and returns
// the subjects it lists, in order: those the script has more to do for than
// their increments (evaluate, write a verdict, note distinct values or
// bucket arrivals), or every subject when the script may have to evaluate
// them all (the caller does not know the stored offset).
func (s *Applier) applyArgs(b consume.Batch, now time.Time, pl *profiles, order []*pendingSubject, hr *Headroom) ([]any, []*pendingSubject) {
	args := make([]any, 0, 16+2*len(pl.rules)+16*len(order))
	gseq := int64(-2)
	if hr != nil {
		gseq = hr.seq
	}
	// A write-back owner's batch continues from the decisions offset it
	// last wrote, whatever batches it counted in memory only since.
	first, fence := b.First, 0
	if hr != nil && hr.wb != nil {
		fence = 1
		if hr.next >= 0 {
			first = hr.next
		}
	}
	args = append(args, s.keys.Slot(b.Partition), first, b.Last, now.UnixMilli(), int64(s.slack/time.Second),
		hr.expect(), s.st.MaxLog(), s.keep, gseq, fence, len(pl.rules))
	for _, r := range pl.rules {
		args = append(args, r.Name, r.Message)
	}
	args = append(args, len(pl.list))
	for _, p := range pl.list {
		args = append(args, p.maxw, len(p.limits))
		for _, l := range p.limits {
			args = append(args, l.ruleIx+1, l.limit.Count, int64(l.limit.Window/time.Second), flag(l.rule.Shadow), l.rule.Distinct)
		}
		args = append(args, len(p.buckets))
		for _, b := range p.buckets {
			bk := b.rule.Bucket
			args = append(args, b.ruleIx+1, bk.Interval().Microseconds(), bk.Burst, flag(b.rule.Shadow), bk.Rate.String())
		}
	}
	args = s.appendWrites(args, b.Partition, floorDiv(now.UnixMilli(), 1000), pl, order)
	partial := hr.expect() != -2
	sent := order
	if partial {
		sent = make([]*pendingSubject, 0, len(order)/4)
		for _, ps := range order {
			if ps.memory && !ps.writes {
				continue
			}
			if ps.plan != evalNone || ps.verdict != nil || len(ps.seen) > 0 || len(ps.bev) > 0 {
				sent = append(sent, ps)
			}
		}
	}
	args = append(args, flag(partial), len(sent))
	for _, ps := range sent {
		plan := ps.plan
		if ps.verdict != nil {
			plan = evalNone
		}
		args = append(args, window.Field(ps.sub), ps.profile+1, ps.eval, plan, len(ps.seen))
		for k, sec := range ps.seen {
			args = append(args, k.kind, k.value, sec)
		}
		args = append(args, len(ps.bev))
		for _, e := range ps.bev {
			args = append(args, e.us, e.n)
		}
		args = ps.verdict.appendArgs(args)
	}
	return args, sent
}

// appendWrites appends the batch's bucket increments as the script applies
// them, one hash field each: {key, field, n, ttl}. A hash the increment
// creates expires ttl seconds later, when no window of the subject's rules
// can read it any more.
func (s *Applier) appendWrites(args []any, partition int, now int64, pl *profiles, order []*pendingSubject) []any {
	at := len(args)
	args = append(args, 0)
	n := 0
	slack := int64(s.slack / time.Second)
	for _, ps := range order {
		if ps.memory {
			continue // kept in memory until the checkpoint
		}
		maxw := pl.list[ps.profile].maxw
		pre := s.keys.SubjectPrefix(partition, ps.sub)
		for _, w := range ps.sums {
			ttl := max((w.id.n+1)*w.id.span()+maxw+slack-now, 1)
			args = append(args, window.BucketKey(pre, w.id.level, w.id.n), w.field, w.n, ttl)
			n++
		}
	}
	args[at] = n
	return args
}

// sumLevels adds up each subject's increments per bucket hash field at the
// levels its longest window reads (as fg_incr: a subject's seconds share
// their minute and hour), in a stable order, so that the writes of a batch
// (and a failed run's undo) do not depend on map order.
func sumLevels(pl *profiles, order []*pendingSubject) {
	buf := make([]bucketSum, 0, 3*len(order))
	for _, ps := range order {
		maxw := pl.list[ps.profile].maxw
		start := len(buf)
		ps.incs.each(func(sec, c int64) {
			lv, k := levelsOf(sec, maxw)
			for _, f := range lv[:k] {
				buf = addBucketSum(buf, start, f, c)
			}
		})
		sums := buf[start:len(buf):len(buf)]
		slices.SortFunc(sums, func(a, b bucketSum) int { return a.compare(b) })
		ps.sums = sums
	}
}

// bucketSum is one hash field's increment.
type bucketSum struct {
	bucketField
	n int64
}

// addBucketSum adds n to field f among the sums from start on.
func addBucketSum(sums []bucketSum, start int, f bucketField, n int64) []bucketSum {
	for i := start; i < len(sums); i++ {
		if sums[i].bucketField == f {
			sums[i].n += n
			return sums
		}
	}
	return append(sums, bucketSum{f, n})
}

func (a bucketSum) compare(b bucketSum) int {
	if c := cmp.Compare(a.id.level, b.id.level); c != 0 {
		return c
	}
	if c := cmp.Compare(a.id.n, b.id.n); c != 0 {
		return c
	}
	return cmp.Compare(a.field, b.field)
}

// profiles numbers the limit profiles of a batch: the limits of a
// subject's rules, less the rules that allowlist it. Subjects of one action
// and kind mostly share one.
type profiles struct {
	set *rules.Set
	// strictMirrored: the owner answers strict takes from its memory
	// (ApplierConfig.OwnerTakes), so strict rules are mirrored too.
	strictMirrored bool
	byKey          map[profileKey]int
	list           []profile
	ruleIx         map[*rules.Rule]int
	rules          []*rules.Rule
}

type profileKey struct {
	action, kind string
	allowed      string // names of rules that allowlist the subject
	overridden   string // rule:line of the overrides that give it its counts
}

type profile struct {
	maxw     int64
	mirrored bool // window limits only, none strict: evaluated from the partition's copies
	limits   []profileLimit
	buckets  []profileLimit // rules with a bucket
	distinct []string       // kinds of attrs its distinct limits count
}

type profileLimit struct {
	rule   *rules.Rule
	ruleIx int
	limit  rules.Limit
}

func newProfiles(set *rules.Set, strictMirrored bool) *profiles {
	return &profiles{set: set, strictMirrored: strictMirrored, byKey: map[profileKey]int{}, ruleIx: map[*rules.Rule]int{}}
}

// of returns the index of sub's profile.
func (p *profiles) of(sub window.Subject, maxw int64) int {
	matched := p.set.Match(sub.Action, sub.Kind)
	var allowed []string
	var overridden []string
	for _, r := range matched {
		if r.Allowed(sub.Subject) {
			allowed = append(allowed, r.Name)
		} else if _, ov := p.set.Limits(r, sub.Kind, sub.Subject); ov != nil {
			// Subjects with other counts (rules' overrides) are another
			// profile: the override's line names it in the file.
			overridden = append(overridden, r.Name+":"+strconv.Itoa(ov.Line))
		}
	}
	key := profileKey{sub.Action, sub.Kind, strings.Join(allowed, ","), strings.Join(overridden, ",")}
	if ix, ok := p.byKey[key]; ok {
		return ix
	}
	pr := profile{maxw: maxw}
	for _, r := range matched {
		if r.Allowed(sub.Subject) {
			continue
		}
		ix, ok := p.ruleIx[r]
		if !ok {
			ix = len(p.rules)
			p.ruleIx[r] = ix
			p.rules = append(p.rules, r)
		}
		limits, _ := p.set.Limits(r, sub.Kind, sub.Subject)
		for _, l := range limits {
			pr.limits = append(pr.limits, profileLimit{rule: r, ruleIx: ix, limit: l})
		}
		if r.Bucket != nil {
			pr.buckets = append(pr.buckets, profileLimit{rule: r, ruleIx: ix})
		}
		if r.Distinct != "" && !slices.Contains(pr.distinct, r.Distinct) {
			pr.distinct = append(pr.distinct, r.Distinct)
		}
	}
	pr.mirrored = len(pr.limits) > 0 && len(pr.buckets) == 0 && len(pr.distinct) == 0
	for _, l := range pr.limits {
		pr.mirrored = pr.mirrored && (!l.rule.Strict || p.strictMirrored)
	}
	p.list = append(p.list, pr)
	p.byKey[key] = len(p.list) - 1
	return len(p.list) - 1
}

// observe records what an event adds to its subject's distinct sets and
// buckets.
func (p *profiles) observe(ps *pendingSubject, ev *event.Event, sec int64) {
	pr := &p.list[ps.profile]
	for _, kind := range pr.distinct {
		if v, ok := ev.Attrs[kind]; ok {
			v = p.set.Subject(kind, v)
			if ps.seen == nil {
				ps.seen = map[seenKey]int64{}
			}
			k := seenKey{kind, v}
			ps.seen[k] = max(ps.seen[k], sec)
		}
	}
	if len(pr.buckets) > 0 {
		// Event times travel in milliseconds (the event contract).
		ps.bev = append(ps.bev, bucketEvent{us: ev.TS.UnixMilli() * 1000, n: max(ev.N, 1)})
	}
}

// decisions reads the script's {subject, limit, count, until_ms, shadow,
// eval_sec}* tuples; a limit index past the subject's window limits is one
// of its buckets.
func (p *profiles) decisions(flat []int64, order []*pendingSubject) []window.DecisionMessage {
	var out []window.DecisionMessage
	for i := 0; i+5 < len(flat); i += 6 {
		ps := order[flat[i]-1]
		pr := p.list[ps.profile]
		ix := int(flat[i+1]) - 1
		var l profileLimit
		var bucket *rules.Bucket
		if ix < len(pr.limits) {
			l = pr.limits[ix]
		} else {
			l = pr.buckets[ix-len(pr.limits)]
			bucket = l.rule.Bucket
			l.limit = rules.Limit{Count: bucket.Burst}
		}
		out = append(out, window.DecisionMessage{
			Action:  ps.sub.Action,
			Kind:    ps.sub.Kind,
			Subject: ps.sub.Subject,
			Rule:    l.rule.Name,
			Limit:   l.limit,
			Bucket:  bucket,
			Count:   flat[i+2],
			Until:   time.UnixMilli(flat[i+3]).UTC(),
			Shadow:  flat[i+4] == 1,
			Message: l.rule.Message,
			TS:      time.Unix(flat[i+5], 0).UTC(),
			Trigger: time.UnixMilli(ps.latest).UTC(),
		})
	}
	return out
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

func replyInt(v []any, i int) int64 {
	if i >= len(v) {
		return 0
	}
	n, _ := v[i].(int64)
	return n
}

func replyInts(v any) []int64 {
	xs, _ := v.([]any)
	out := make([]int64, len(xs))
	for i, x := range xs {
		out[i], _ = x.(int64)
	}
	return out
}
