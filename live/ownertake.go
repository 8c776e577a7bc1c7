package live

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"floodgate/aggregator"
	"floodgate/event"
	"floodgate/rules"
	"floodgate/window"
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
// closed). An uncertain append keeps its overlay entry: counted until it
// expires, never lost.

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
	Pipeline() redis.Pipeliner
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	XRange(ctx context.Context, stream, start, stop string) *redis.XMessageSliceCmd
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
}

// overlay is a partition's takes answered whose events the owner has not
// counted yet.
type overlay struct {
	bySub map[window.Subject][]inflight
	byID  map[string]window.Subject
}

type inflight struct {
	id     string // the event's
	sec, n int64
}

func newOverlay() *overlay {
	return &overlay{bySub: map[window.Subject][]inflight{}, byID: map[string]window.Subject{}}
}

func (o *overlay) add(sub window.Subject, t inflight) {
	if _, ok := o.byID[t.id]; ok {
		return
	}
	o.byID[t.id] = sub
	o.bySub[sub] = append(o.bySub[sub], t)
}

// drop removes the take whose event has id, reporting whether it was there.
func (o *overlay) drop(id string) bool {
	sub, ok := o.byID[id]
	if !ok {
		return false
	}
	delete(o.byID, id)
	ts := slices.DeleteFunc(o.bySub[sub], func(t inflight) bool { return t.id == id })
	if len(ts) == 0 {
		delete(o.bySub, sub)
	} else {
		o.bySub[sub] = ts
	}
	return true
}

// expire drops sub's takes of seconds before from: no window reaches them.
func (o *overlay) expire(sub window.Subject, from int64) []inflight {
	ts := o.bySub[sub]
	k := 0
	for _, t := range ts {
		if t.sec >= from {
			ts[k] = t
			k++
			continue
		}
		delete(o.byID, t.id)
	}
	if k == 0 {
		delete(o.bySub, sub)
		return nil
	}
	o.bySub[sub] = ts[:k]
	return ts[:k]
}

// sweep drops every take of seconds before from.
func (o *overlay) sweep(from int64) {
	for sub := range o.bySub {
		o.expire(sub, from)
	}
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

// TakeQueued implements limiter.Taker for the partitions this sink owns:
// each query's windows are summed from the owner's memory and overlay,
// and a take every limit admits is appended to its partitions' take
// streams before it is answered. Every event of a counted query goes into
// the stream (queued); an event of no counted query is left to the caller.
// A take of a partition not answered here fails with ErrNotOwner.
func (s *Sink) TakeQueued(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64, events []window.QueuedEvent) (bool, []bool, []window.EvalState, error) {
	taken, queued, states, err := s.takeQueued(ctx, now, qs, n, events)
	result := "taken"
	switch {
	case errors.Is(err, ErrNotOwner):
		result = "not_owner"
	case err != nil:
		result = "failed"
	case !taken:
		result = "refused"
	}
	s.m.ownerTakes.WithLabelValues(result).Inc()
	return taken, queued, states, err
}

func (s *Sink) takeQueued(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64, events []window.QueuedEvent) (bool, []bool, []window.EvalState, error) {
	if s.cfg.Takes == nil {
		return false, nil, nil, errors.New("live sink: owner takes are off")
	}
	byQuery, queued, err := matchEvents(qs, events)
	if err != nil {
		return false, nil, nil, err
	}
	groups := map[int][]int{}
	for i, q := range qs {
		part, err := s.cfg.Applier.Store().PartitionOf(q.Subject)
		if err != nil {
			return false, nil, nil, err
		}
		groups[part] = append(groups[part], i)
	}
	parts := make([]int, 0, len(groups))
	for part := range groups {
		parts = append(parts, part)
	}
	slices.Sort(parts)
	states, admitted, err := s.admit(ctx, now, qs, n, byQuery, groups, parts)
	if err != nil || !admitted {
		return false, nil, states, err
	}
	if err := s.appendTakes(ctx, byQuery, groups, parts); err != nil {
		// maybe appended: the overlay keeps the take (counted, never lost)
		return false, nil, nil, err
	}
	return true, queued, states, nil
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
// queries' takes to their overlays.
func (s *Sink) admit(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64, byQuery []*queuedEvent, groups map[int][]int, parts []int) ([]window.EvalState, bool, error) {
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
			return nil, false, fmt.Errorf("partition %d: %w", part, ErrNotOwner)
		}
		p.mu.Lock()
		held = append(held, p)
		if !p.takes.open || p.hr == nil || p.hr.wb == nil {
			return nil, false, fmt.Errorf("partition %d: %w", part, ErrNotOwner)
		}
		if age := now.Sub(p.takes.bansAt); age > maxBanAge {
			return nil, false, fmt.Errorf("partition %d: its bans were last read %s ago: %w", part, age.Round(time.Millisecond), ErrNotOwner)
		}
		for _, i := range groups[part] {
			st, blk, err := s.evalTake(ctx, set, p, part, qs[i], n, nowSec)
			if err != nil {
				return nil, false, err
			}
			if b := p.takes.bans[window.Field(qs[i].Subject)]; b.InForce(now) {
				st.Ban, blk = b, true
			}
			states[i], blocked = st, blocked || blk
		}
	}
	if blocked {
		return states, false, nil
	}
	for k, part := range parts {
		ov := held[k].takes.ov
		for _, i := range groups[part] {
			if e := byQuery[i]; e != nil {
				if len(ov.byID) >= s.cfg.Takes.MaxInflight {
					return nil, false, fmt.Errorf("partition %d: %d takes wait for their events to be counted (the relay or the apply lags): %w", part, len(ov.byID), ErrNotOwner)
				}
				ov.add(qs[i].Subject, inflight{id: e.id, sec: nowSec, n: n})
			}
		}
	}
	return states, true, nil
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
		pl := &profiles{list: []profile{pr}}
		if held == nil {
			held = redisHeld{}
		}
		missing := map[*pendingSubject]map[hashID]bool{ps: ev.missing}
		b := aggregator.Batch{Topic: p.takes.topic, Partition: part}
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

// takeRound is one partition's part of an admitted take: the append of
// its events.
type takeRound struct {
	partition int
	evs       []string // "<key length>:<key><value>" each
	done      chan error
}

// appendTakes appends the take's events to their partitions' take streams,
// one entry per partition, and waits for every reply (an error: the first).
func (s *Sink) appendTakes(ctx context.Context, byQuery []*queuedEvent, groups map[int][]int, parts []int) error {
	sent := make([]*takeRound, 0, len(parts))
	stopped := make([]<-chan struct{}, 0, len(parts))
	for _, part := range parts {
		t := &takeRound{partition: part, done: make(chan error, 1)}
		for _, i := range groups[part] {
			if e := byQuery[i]; e != nil {
				t.evs = append(t.evs, e.enc)
			}
		}
		if len(t.evs) == 0 {
			continue // nothing counted in this partition
		}
		s.mu.Lock()
		p := s.parts[part]
		s.mu.Unlock()
		if p == nil {
			return fmt.Errorf("partition %d: %w", part, ErrNotOwner)
		}
		select {
		case s.rounds <- t:
		case <-p.stopped:
			return fmt.Errorf("partition %d: %w", part, ErrNotOwner)
		case <-ctx.Done():
			return fmt.Errorf("owner take: %w", context.Cause(ctx))
		}
		sent, stopped = append(sent, t), append(stopped, p.stopped)
	}
	var first error
	for k, t := range sent {
		var err error
		select {
		case err = <-t.done:
		case <-stopped[k]:
			err = fmt.Errorf("partition %d revoked during its take round: %w", t.partition, ErrNotOwner)
		case <-ctx.Done():
			err = fmt.Errorf("owner take: %w", context.Cause(ctx))
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// RunTakes runs the owner takes' rounds until ctx ends (required with
// SinkConfig.Takes): each round carries the appends that queued while the
// last one ran, in one pipeline.
func (s *Sink) RunTakes(ctx context.Context) error {
	if s.cfg.Takes == nil {
		return nil
	}
	for {
		var round []*takeRound
		select {
		case <-ctx.Done():
			return nil
		case t := <-s.rounds:
			round = append(round, t)
		}
	fill:
		for len(round) < maxTakeRound {
			select {
			case t := <-s.rounds:
				round = append(round, t)
			default:
				break fill
			}
		}
		s.runTakeRound(ctx, round)
	}
}

// runTakeRound sends one round and answers each of its parts. An append
// is a plain XADD: the overlay's cap (TakesConfig.MaxInflight) bounds the
// stream, whose entries not yet counted the overlay holds.
func (s *Sink) runTakeRound(ctx context.Context, round []*takeRound) {
	keys := s.cfg.Applier.keys
	pipe := s.cfg.Takes.Redis.Pipeline()
	cmds := make([]*redis.StringCmd, len(round))
	for k, t := range round {
		vals := make([]any, 0, 2*len(t.evs))
		for i, e := range t.evs {
			vals = append(vals, ownerTakeField+strconv.Itoa(i+1), e)
		}
		cmds[k] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: keys.Takes(t.partition), Values: vals})
	}
	start := time.Now()
	_, _ = pipe.Exec(ctx) // errors are read per command
	s.cfg.Applier.st.Observe("owner_take", start)
	for k, t := range round {
		if err := cmds[k].Err(); err != nil {
			t.done <- fmt.Errorf("owner take: append to partition %d's take stream: %w", t.partition, err)
			continue
		}
		t.done <- nil
	}
}

// resumeTakes readies a resumed partition's takes (under p.mu): the take
// stream's owner takes join the overlay — answered by the last owner,
// perhaps not yet published, so not in the log this owner replays — and
// takes are answered once this owner has counted up to the partition's
// end as it stands after that load.
func (s *Sink) resumeTakes(ctx context.Context, topic string, partition int, p *partState, next int64) {
	p.takes.topic = topic
	p.closeTakes()
	p.takes.applied = next
	if p.takes.ov == nil {
		p.takes.ov = newOverlay()
		if err := s.loadOverlay(ctx, partition, p.takes.ov); err != nil {
			// answered only once the load succeeds: a later resume, or
			// the reopen tick
			p.takes.ov = nil
			s.log.Warn("owner takes: loading the take stream failed; the partition's takes fail until it succeeds", "partition", partition, "err", err)
			return
		}
	}
	s.refreshBans(ctx, partition, p)
	s.readTarget(ctx, partition, p)
}

// readBans reads the partition's bans, by subject field.
func (s *Sink) readBans(ctx context.Context, partition int) (map[string]*window.Ban, error) {
	key := s.cfg.Applier.keys.Bans(partition)
	h, err := s.cfg.Takes.Redis.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	bans := make(map[string]*window.Ban, len(h))
	for f, js := range h {
		b, err := window.ParseBan([]byte(js))
		if err != nil {
			return nil, fmt.Errorf("read %s: %s: %w", key, f, err)
		}
		bans[f] = b
	}
	return bans, nil
}

// refreshBans reads the partition's bans into p (under p.mu). A failure
// keeps the last ones; takes fail once they are maxBanAge old.
func (s *Sink) refreshBans(ctx context.Context, partition int, p *partState) {
	bans, err := s.readBans(ctx, partition)
	if err != nil {
		s.log.Warn("owner takes: reading the partition's bans failed; its takes fail once the last read is old", "partition", partition, "err", err, "max_age", maxBanAge)
		return
	}
	p.takes.bans, p.takes.bansAt = bans, s.cfg.Now()
}

// loadOverlay adds the take stream's owner takes to ov, as of now.
func (s *Sink) loadOverlay(ctx context.Context, partition int, ov *overlay) error {
	key := s.cfg.Applier.keys.Takes(partition)
	msgs, err := s.cfg.Takes.Redis.XRange(ctx, key, "-", "+").Result()
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	sec := floorDiv(s.cfg.Now().UnixMilli(), 1000)
	for _, m := range msgs {
		for field, v := range m.Values {
			str, _ := v.(string)
			if len(field) < 2 || field[:1] != ownerTakeField {
				continue // a limiter's take (stage A): counted in Redis
			}
			_, value, err := window.ParseQueuedEvent(str)
			if err != nil {
				continue // the relay drops it, loudly
			}
			ev, err := event.Decode(value)
			if err != nil {
				continue
			}
			sub := window.Subject{Action: ev.Action, Kind: ev.Kind, Subject: ev.Subject}
			// at its own second, which the take counted at (its event's
			// time), or now if that is ahead
			at := min(floorDiv(ev.TS.UnixMilli(), 1000), sec)
			ov.add(sub, inflight{id: ev.ID, sec: at, n: max(ev.N, 1)})
		}
	}
	return nil
}

// readTarget reads the end offset the partition must be counted up to
// before its takes are answered, and opens them if it is.
func (s *Sink) readTarget(ctx context.Context, partition int, p *partState) {
	first, end, err := s.cfg.Takes.Bounds(ctx, p.takes.topic, partition)
	if err != nil {
		s.log.Warn("owner takes: reading the partition's end offset failed; its takes fail until it succeeds", "partition", partition, "err", err)
		return
	}
	if p.takes.applied < 0 {
		// never applied: the group reads from the log's first offset
		p.takes.applied = first
	}
	p.takes.target = end
	p.takes.open = p.takes.applied >= end
}

// takesApplied follows an applied batch (under p.mu): its take events'
// overlay entries go, counted now, and a partition catching up opens once
// it reaches its target. A failed batch closes the takes.
func (s *Sink) takesApplied(ctx context.Context, b aggregator.Batch, p *partState, err error) {
	if err != nil {
		p.closeTakes()
		return
	}
	if ov := p.takes.ov; ov != nil {
		for i := range b.Records {
			if r := &b.Records[i]; r.Take {
				ov.drop(r.Event.ID)
			}
		}
	}
	p.takes.applied = b.Next()
	switch {
	case p.takes.open:
	case p.takes.ov == nil || p.takes.target < 0:
		// read on the reopen tick, not on the batch path
	case p.takes.applied >= p.takes.target:
		p.takes.open = true
	}
}

// reopenTakes, on the partition's tick, reads its bans again, sweeps its
// overlay of expired takes once a second, and retries what a closed gate
// waits for: the overlay's load, the target's read.
func (s *Sink) reopenTakes(ctx context.Context, topic string, partition int, p *partState) {
	if s.cfg.Takes == nil {
		return
	}
	// Redis outside the lock: the partition's batches and takes go on
	bans, berr := s.readBans(ctx, partition)
	if berr != nil && ctx.Err() == nil {
		s.log.Warn("owner takes: reading the partition's bans failed; its takes fail once the last read is old", "partition", partition, "err", berr, "max_age", maxBanAge)
	}
	if s.advertise(p) {
		key := s.cfg.Applier.keys.TakesOwner(partition)
		if err := s.cfg.Takes.Redis.Set(ctx, key, s.cfg.Takes.Advertise, ownerRecordTTL).Err(); err != nil && ctx.Err() == nil {
			s.log.Warn("owner takes: writing the partition's owner record failed; takes forwarded here may fail until it is written", "partition", partition, "err", err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if berr == nil {
		p.takes.bans, p.takes.bansAt = bans, s.cfg.Now()
	}
	if p.takes.topic == "" {
		p.takes.topic = topic
	}
	if sec := floorDiv(s.cfg.Now().UnixMilli(), 1000); p.takes.ov != nil && sec != p.takes.swept {
		p.takes.ov.sweep(sec - int64(rules.MaxWindow/time.Second))
		p.takes.swept = sec
		s.m.inflight.WithLabelValues(strconv.Itoa(partition)).Set(float64(len(p.takes.ov.byID)))
	}
	switch {
	case p.takes.open:
	case p.takes.ov == nil:
		s.resumeTakes(ctx, topic, partition, p, p.takes.applied)
	case p.takes.target < 0:
		s.readTarget(ctx, partition, p)
	}
}

// advertise tells whether the partition's owner record is due: its takes
// are answered here and the record was last written a second ago or more.
func (s *Sink) advertise(p *partState) bool {
	if s.cfg.Takes.Advertise == "" {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	sec := floorDiv(s.cfg.Now().UnixMilli(), 1000)
	if !p.takes.open || sec == p.takes.advertised {
		return false
	}
	p.takes.advertised = sec
	return true
}
