package live

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// Owner takes (stage B of the write-back live path; docs/architecture.md,
// "The owner answers strict takes"): the owner of a partition answers the
// strict takes of its subjects from its memory instead of a script over
// Redis's buckets. Under the partition's lock a take sums each window from
// the bucket copies (loaded as a batch's evaluation loads them) plus an
// overlay of the takes answered whose events the owner has not counted
// yet; when every limit fits and no ban blocks it, the take joins the
// overlay. Its events are then appended to the partition's take stream and
// the answer waits for that: the TakeRelay publishes the entry, the apply
// counts its events like any other and drops its overlay entry. The appends
// of the takes waiting at a moment leave in one pipeline of plain XADDs
// (RunTakes): a script run per take, which read deny records and bans as
// it appended, cost Redis more than the rest of the take together.
//
// Deny records need no read: the owner's counts are what wrote them, and
// a take (count + n within the limit) is refused at least as long as a
// record (written while the count is over it) stands. Bans are an
// operator's: the owner reads its partitions' on every checkpoint tick
// (SinkConfig.CheckpointEvery / 16, 62.5 ms by default), so a ban stops
// owner takes within a tick of being set, and takes fail while the bans
// could not be read for maxBanAge.
//
// A take never reaches past what the owner knows: a partition answers
// only once its owner has counted up to the partition's end as it stood
// after loading the take stream's entries into the overlay (a new owner's
// replay and its predecessor's last takes included), and stops answering
// on anything that makes its memory doubtful (a failed batch, a refused
// checkpoint, the revoke). Meanwhile takes fail (the limiter answers them
// closed). An append without an answer keeps its overlay entry until it
// is settled (ownerloss.go): counted meanwhile, never lost.
//
// A new owner fences the take stream before it loads it (takefence.lua)
// and appends at an epoch past every id the stream held: a former owner
// that has not noticed its loss (cut off from the group, not from Redis)
// appends at its older epoch, Redis refuses, and its takes fail.

// ownerTakeField prefixes the take stream fields of owner takes: the relay
// publishes them without event.HeaderCounted.
const ownerTakeField = "o"

// Limits of owner takes.
const (
	defaultInflight = 100_000
	maxTakeRound    = 256
	// maxBanAge: past it since the bans were last read, takes fail.
	maxBanAge = 5 * time.Second
)

// ErrNotOwner is a take of a partition this owner does not answer for now:
// not assigned here, or not caught up since it was (a start, a rebalance, a
// rewind). The caller answers it closed, with a retry.
var ErrNotOwner = errors.New("partition not answered by this owner now")

// TakesConfig turns on owner takes (SinkConfig.Takes).
type TakesConfig struct {
	// Redis runs the take rounds and reads the take stream at a resume.
	// Required.
	Redis TakesRedis
	// Bounds returns a partition's first offset and its end (the next
	// offset to be written). Required.
	Bounds func(ctx context.Context, topic string, partition int) (first, end int64, err error)
	// MaxInflight bounds a partition's takes answered and not yet counted
	// (its overlay); past it takes fail. Default 100000.
	MaxInflight int
	// Advertise, when set, is written as the owner record of each
	// partition whose takes this owner answers (window.Keys.TakesOwner,
	// refreshed every second, expiring ownerRecordTTL after the last):
	// where package takeroute forwards them.
	Advertise string
}

// ownerRecordTTL is how long an owner record outlives its last refresh.
const ownerRecordTTL = 10 * time.Second

// TakesRedis is what owner takes need of Redis.
type TakesRedis interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	XRange(ctx context.Context, stream, start, stop string) *redis.XMessageSliceCmd
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
}

// takeGate is whether a partition's takes are answered.
type takeGate struct {
	ov    *overlay
	topic string
	open  bool
	// target: the offset the owner must have counted up to before it
	// answers (-1: to be read).
	target  int64
	applied int64 // the next offset to count
	// bans are the partition's bans by subject field as read at bansAt
	// (zero: never).
	bans   map[string]*window.Ban
	bansAt time.Time
	// swept is the second the overlay was last swept of expired takes,
	// advertised the one the owner record was last written at.
	swept, advertised int64
	ev                evaluation // scratch of the partition's takes
	// epoch is the ms part of this owner's take stream ids, set by the
	// fence before the overlay's load (takefence.lua); 0 after the stream
	// went back (a failover), as ids the old epoch gave could come again
	// at or below the take relay's cursor, which would pass them by: no
	// append goes out until the next tick fences anew (ownerloss.go).
	// Atomic: RunTakes reads it for every round. fenced, that a newer
	// owner's fence refused an append: the takes stay closed until the
	// partition is assigned here again.
	epoch  atomic.Int64
	fenced bool
	// held is the last epoch this owner fenced the stream at (epoch goes
	// 0 while a new one is due): what it hands lost events over under.
	held int64
	// acked are the takes' events appended, or maybe, and not yet
	// counted, by event id; lastAck the last id Redis gave this owner's
	// appends (hasAck: one did); doubtAt when the oldest doubt of acked
	// arose (zero: none), and while one is settled, doubtRead when the
	// stream was read (and what it held of them taken back), doubtEnd the
	// partition's end read after. ownerloss.go.
	acked     map[string]*ackedTake
	lastAck   streamID
	hasAck    bool
	doubtAt   time.Time
	doubtRead time.Time
	doubtEnd  int64
}

// takeProfiles caches the limit profiles of owner takes for the rules in
// force: built per take, they were the take's largest allocation. Bounded
// as the rules bound it (an action and kind with a strict rule, the rules
// that allowlist the subject), and cleared past maxTakeProfiles anyway.
type takeProfiles struct {
	mu  sync.Mutex
	set *rules.Set
	pl  *profiles
}

const maxTakeProfiles = 10_000

// of returns sub's profile under set: a copy, as the cache's list grows
// under other partitions' takes.
func (c *takeProfiles) of(set *rules.Set, sub window.Subject, maxw int64) profile {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set != set || len(c.pl.list) >= maxTakeProfiles {
		c.set, c.pl = set, newProfiles(set, true)
	}
	return c.pl.list[c.pl.of(sub, maxw)]
}

// closeTakes stops answering the partition's takes until it has caught up
// again: its memory may not hold what Redis or the log does.
func (p *partState) closeTakes() {
	p.takes.open, p.takes.target = false, -1
}

// TakeQueued implements decide.Taker for the partitions this sink owns:
// each query's windows are summed from the owner's memory and overlay,
// and a take every limit admits is appended to its partitions' take
// streams before it is answered. Every event of a counted query goes into
// the stream (queued); an event of no counted query is left to the caller.
// A take of a partition not answered here fails with ErrNotOwner.
func (s *Sink) TakeQueued(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64, events []window.QueuedEvent) (bool, []bool, []window.EvalState, error) {
	taken, queued, states, err := s.takeQueued(ctx, now, qs, n, events)
	s.m.ownerTakes.WithLabelValues(takeResult(taken, err)).Inc()
	return taken, queued, states, err
}

// takeResult is a take's floodgate_live_owner_takes_total label.
func takeResult(taken bool, err error) string {
	switch {
	case errors.Is(err, errTakeFenced):
		return "fenced"
	case errors.Is(err, ErrNotOwner):
		return "not_owner"
	case err != nil:
		return "failed"
	case !taken:
		return "refused"
	}
	return "taken"
}

// byPartition groups qs by their subjects' partitions: the queries of
// each, and the partitions in order.
func (s *Sink) byPartition(qs []window.EvalQuery) (map[int][]int, []int, error) {
	groups := map[int][]int{}
	for i, q := range qs {
		part, err := s.cfg.Applier.Store().PartitionOf(q.Subject)
		if err != nil {
			return nil, nil, err
		}
		groups[part] = append(groups[part], i)
	}
	parts := make([]int, 0, len(groups))
	for part := range groups {
		parts = append(parts, part)
	}
	slices.Sort(parts)
	return groups, parts, nil
}

func (s *Sink) takeQueued(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64, events []window.QueuedEvent) (bool, []bool, []window.EvalState, error) {
	if s.cfg.Takes == nil {
		return false, nil, nil, errors.New("live sink: owner takes are off")
	}
	if err := checkTakeN(n); err != nil {
		return false, nil, nil, err
	}
	byQuery, queued, err := matchEvents(qs, events)
	if err != nil {
		return false, nil, nil, err
	}
	groups, parts, err := s.byPartition(qs)
	if err != nil {
		return false, nil, nil, err
	}
	states, held, err := s.admit(ctx, now, qs, n, byQuery, groups, parts)
	if err != nil || held == nil {
		return false, nil, states, err
	}
	if err := s.appendTakes(ctx, byQuery, groups, parts, held); err != nil {
		// maybe appended: the overlay keeps the take (counted, never lost)
		return false, nil, nil, err
	}
	return true, queued, states, nil
}

// checkTakeN refuses a take's n outside the event contract's: every
// caller bounds it, and a window's sum plus an n near 2^63 would overflow
// past any limit (and the overlay's sums after it).
func checkTakeN(n int64) error {
	if n < 1 || n > event.MaxN {
		return fmt.Errorf("owner take: n=%d, want 1..%d", n, event.MaxN)
	}
	return nil
}

// queuedEvent is a counted query's event as the take stream holds it.
type queuedEvent struct {
	id, enc string
}

// matchEvents gives each counted query its event (by its Kafka key, the
// subject's) and tells which events are queued. A counted query without an
// event fails: the owner counts a take only through its event.
func matchEvents(qs []window.EvalQuery, events []window.QueuedEvent) ([]*queuedEvent, []bool, error) {
	byQuery := make([]*queuedEvent, len(qs))
	queued := make([]bool, len(events))
	keys := make([]string, len(qs))
	for i, q := range qs {
		if q.Count {
			keys[i] = q.Subject.Kind + ":" + event.CanonicalSubject(q.Subject.Subject)
		}
	}
	for k, e := range events {
		id := e.ID
		if id == "" {
			ev, err := event.Decode(e.Value)
			if err != nil {
				return nil, nil, fmt.Errorf("owner take: event %d: %w", k, err)
			}
			id = ev.ID
		}
		for i, q := range qs {
			if q.Count && byQuery[i] == nil && string(e.Key) == keys[i] {
				byQuery[i] = &queuedEvent{id: id, enc: strconv.Itoa(len(e.Key)) + ":" + string(e.Key) + string(e.Value)}
				queued[k] = true
				break
			}
		}
	}
	for i, q := range qs {
		if q.Count && byQuery[i] == nil {
			return nil, nil, fmt.Errorf("owner take: no event for %s: the owner counts a take by its event", window.Field(q.Subject))
		}
	}
	return byQuery, queued, nil
}

// admit evaluates every query under its partition's lock (partitions in
// order) and, when every limit fits and no ban stands, adds the counted
// queries' takes to their overlays and notes their appends as pending
// (partState.appends), returning the partitions (nil: not admitted).
func (s *Sink) admit(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64, byQuery []*queuedEvent, groups map[int][]int, parts []int) ([]window.EvalState, []*partState, error) {
	set := s.cfg.Rules()
	nowSec := floorDiv(now.UnixMilli(), 1000)
	states := make([]window.EvalState, len(qs))
	held := make([]*partState, 0, len(parts))
	defer func() {
		for _, p := range held {
			p.mu.Unlock()
		}
	}()
	blocked := false
	for _, part := range parts {
		s.mu.Lock()
		p := s.parts[part]
		s.mu.Unlock()
		if p == nil {
			return nil, nil, fmt.Errorf("partition %d: %w", part, ErrNotOwner)
		}
		p.mu.Lock()
		held = append(held, p)
		if !p.takes.open || p.hr == nil || p.hr.wb == nil {
			return nil, nil, fmt.Errorf("partition %d: %w", part, ErrNotOwner)
		}
		if age := now.Sub(p.takes.bansAt); age > maxBanAge {
			return nil, nil, fmt.Errorf("partition %d: its bans were last read %s ago: %w", part, age.Round(time.Millisecond), ErrNotOwner)
		}
		for _, i := range groups[part] {
			st, blk, err := s.evalTake(ctx, set, p, part, qs[i], n, nowSec)
			if err != nil {
				return nil, nil, err
			}
			if b := p.takes.bans[window.Field(qs[i].Subject)]; b.InForce(now) {
				st.Ban, blk = b, true
			}
			states[i], blocked = st, blocked || blk
		}
	}
	if blocked {
		return states, nil, nil
	}
	for k, part := range parts {
		ov := held[k].takes.ov
		for _, i := range groups[part] {
			if e := byQuery[i]; e != nil {
				if len(ov.byID) >= s.cfg.Takes.MaxInflight {
					return nil, nil, fmt.Errorf("partition %d: %d takes wait for their events to be counted (the relay or the apply lags): %w", part, len(ov.byID), ErrNotOwner)
				}
				ov.add(qs[i].Subject, inflight{id: e.id, sec: nowSec, n: n})
			}
		}
	}
	for k, part := range parts {
		if slices.ContainsFunc(groups[part], func(i int) bool { return byQuery[i] != nil }) {
			// under the lock, with the gate open: a revoke waits for it
			held[k].appends.Add(1)
		}
	}
	return states, slices.Clone(held), nil
}

// evalTake sums q's windows at nowSec from p's copies (loading what they
// lack) and overlay, and tells whether n more are blocked.
func (s *Sink) evalTake(ctx context.Context, set *rules.Set, p *partState, part int, q window.EvalQuery, n, nowSec int64) (window.EvalState, bool, error) {
	if len(q.Buckets) > 0 {
		return window.EvalState{}, false, fmt.Errorf("owner take %s: a bucket rule is answered by the limiter's take script, not the owner", window.Field(q.Subject))
	}
	for _, l := range q.Limits {
		if l.Distinct != "" {
			return window.EvalState{}, false, fmt.Errorf("owner take %s: a distinct limit is answered by the limiter's take script, not the owner", window.Field(q.Subject))
		}
	}
	hr := p.hr
	hr.use(set, 1)
	pr := s.takeProfiles.of(set, q.Subject, int64(q.MaxWindow/time.Second))
	r := hr.roomFor(q.Subject, len(pr.limits)+len(pr.buckets))
	if r != nil {
		hr.mir.prune(r, nowSec, pr.maxw, int64(s.cfg.Applier.slack/time.Second))
	}
	ov := p.takes.ov.expire(q.Subject, nowSec-pr.maxw+1)
	var held redisHeld
	ev := &p.takes.ev // the partition's scratch: its slices outlive the take
	for round := 0; ; round++ {
		ev.start(hr.mir, hr.roomOf(q.Subject))
		st, blocked := takeState(ev, q, ov, n, nowSec)
		if len(ev.missing) == 0 {
			hr.mir.trim()
			return st, blocked, nil
		}
		if ev.r == nil || round == maxLoadRounds {
			return window.EvalState{}, false, fmt.Errorf("owner take %s: its bucket copies cannot be held", window.Field(q.Subject))
		}
		// loaded as a batch's evaluation loads a subject's hashes
		ps := &pendingSubject{sub: q.Subject, eval: nowSec, plan: evalAll}
		if s.cfg.Applier.makeUnderEmpty(hr, ev.r, ps, ev.missing, window.Levels(pr.maxw)) && len(ev.missing) == 0 {
			continue
		}
		pl := &profiles{list: []profile{pr}}
		if held == nil {
			held = redisHeld{}
		}
		missing := map[*pendingSubject]map[hashID]bool{ps: ev.missing}
		b := consume.Batch{Topic: p.takes.topic, Partition: part}
		offkey := s.cfg.Applier.keys.Offset(s.cfg.Group, p.takes.topic, part)
		if err := s.cfg.Applier.loadMirrored(ctx, offkey, s.cfg.Group, b, missing, planLoads(missing, held, pl), held, hr); err != nil {
			if errors.Is(err, errFenced) || errors.Is(err, errMirrorStale) {
				p.closeTakes()
				p.rereadLocked(err.Error())
			}
			return window.EvalState{}, false, fmt.Errorf("owner take %s: %w", window.Field(q.Subject), err)
		}
	}
}

// takeState is q's windows at nowSec: the copies' sums plus the overlay's
// takes, and for a limit that n more would pass, the second it fits again.
func takeState(ev *evaluation, q window.EvalQuery, ov []inflight, n, nowSec int64) (window.EvalState, bool) {
	st := window.EvalState{Sums: make([]int64, len(q.Limits)), Until: make([]time.Time, len(q.Limits))}
	blocked := false
	for i, l := range q.Limits {
		w := int64(l.Limit.Window / time.Second)
		cs := ev.sum(nowSec, w)
		var os int64
		for _, t := range ov {
			if t.sec > nowSec-w {
				os += t.n
			}
		}
		st.Sums[i] = cs + os
		excess := cs + os + n - l.Limit.Count
		if excess <= 0 {
			continue
		}
		u := nowSec + w
		if excess <= cs {
			u = ev.until(nowSec, w, excess)
		} else {
			u = overlayUntil(ov, nowSec, w, excess-cs, u)
		}
		st.Until[i] = time.Unix(u, 0).UTC()
		blocked = blocked || l.Block
	}
	return st, blocked
}

// overlayUntil is the second after which the window of w ending there has
// dropped need of the overlay's takes (they are the newest events), def
// when it holds too few.
func overlayUntil(ov []inflight, nowSec, w, need, def int64) int64 {
	in := make([]inflight, 0, len(ov))
	for _, t := range ov {
		if t.sec > nowSec-w {
			in = append(in, t)
		}
	}
	slices.SortFunc(in, func(a, b inflight) int { return int(a.sec - b.sec) })
	for _, t := range in {
		if need -= t.n; need <= 0 {
			return t.sec + w
		}
	}
	return def
}
