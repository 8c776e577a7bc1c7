package live

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// takeRound is one partition's part of an admitted take: the append of
// its events.
type takeRound struct {
	partition int
	p         *partState // its appends count this round until it has run
	epoch     int64      // the partition's takeGate.epoch, read as it is sent
	ids       []string   // the events' ids
	evs       []string   // "<key length>:<key><value>" each
	done      chan error
	// state: roundQueued until RunTakes sends it (roundSent) or its take
	// gives up waiting first (roundAbandoned: never sent).
	state atomic.Int32
}

const (
	roundQueued int32 = iota
	roundSent
	roundAbandoned
)

// errNotAppended is a round of which nothing is in the take stream: a
// newer owner's fence refused it (errTakeFenced), or it never ran. A take
// none of whose rounds was appended may go to another owner whole.
var (
	errNotAppended = fmt.Errorf("not appended: %w", ErrNotOwner)
	errTakeFenced  = fmt.Errorf("a newer owner fenced the take stream: %w", errNotAppended)
	// errAbandoned is a round its take stopped waiting for before it was
	// sent: it never will be. Certain, but not another owner's to take.
	errAbandoned = errors.New("given up before it was sent")
)

// appendTakes appends the take's events to their partitions' take streams,
// one entry per partition, and waits for every reply. held are the
// partitions admit took them in, whose pending appends each round settles
// once it has run (or here, a round never handed over). The error wraps
// ErrNotOwner only when no round may have been appended: otherwise a
// router sending the take elsewhere would count part of it twice.
func (s *Sink) appendTakes(ctx context.Context, byQuery []*queuedEvent, groups map[int][]int, parts []int, held []*partState) error {
	var rounds []*takeRound
	for k, part := range parts {
		t := &takeRound{partition: part, p: held[k], done: make(chan error, 1)}
		for _, i := range groups[part] {
			if e := byQuery[i]; e != nil {
				t.ids, t.evs = append(t.ids, e.id), append(t.evs, e.enc)
			}
		}
		if len(t.evs) > 0 { // else nothing counted in this partition
			rounds = append(rounds, t)
		}
	}
	sent, first := s.handOver(ctx, rounds)
	appended, uncertain := false, false
	for _, t := range rounds[:sent] {
		var err error
		select {
		case err = <-t.done:
		case <-ctx.Done():
			err = fmt.Errorf("owner take: partition %d: %w", t.partition, context.Cause(ctx))
			if t.state.CompareAndSwap(roundQueued, roundAbandoned) {
				// RunTakes drops it unsent, and its takes from the overlay
				err = fmt.Errorf("%w: %w", err, errAbandoned)
			}
		}
		switch {
		case err == nil:
			appended = true
		case !errors.Is(err, errNotAppended) && !errors.Is(err, errAbandoned):
			uncertain = true
		}
		if err != nil && first == nil {
			first = err
		}
	}
	if first != nil && (appended || uncertain) {
		// %v: no ErrNotOwner any more, the take fails closed here
		return fmt.Errorf("owner take: appended in part, or not certainly: %v", first)
	}
	return first
}

// handOver queues the rounds for RunTakes in order and returns how many it
// queued; the first it could not (the partition revoked, ctx ended) and
// those after it are settled here, never run.
func (s *Sink) handOver(ctx context.Context, rounds []*takeRound) (int, error) {
	for k, t := range rounds {
		var err error
		select {
		case s.rounds <- t:
			continue
		case <-t.p.stopped:
			err = fmt.Errorf("partition %d: %w", t.partition, errNotAppended)
		case <-ctx.Done():
			err = fmt.Errorf("owner take: %w", context.Cause(ctx))
		}
		for _, u := range rounds[k:] {
			s.unsent(u)
		}
		return k, err
	}
	return len(rounds), nil
}

// RunTakes runs the owner takes' rounds until ctx ends (required with
// SinkConfig.Takes): each round carries the appends that queued while the
// last one ran, in one pipeline.
func (s *Sink) RunTakes(ctx context.Context) error {
	if s.cfg.Takes == nil {
		return nil
	}
	verify := time.NewTicker(verifyEvery)
	defer verify.Stop()
	for {
		var round []*takeRound
		select {
		case <-ctx.Done():
			s.drainRounds()
			return nil
		case <-verify.C:
			s.verifyStreams(ctx)
			s.expireReservations()
			continue
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
	round = slices.DeleteFunc(round, func(t *takeRound) bool {
		if !t.state.CompareAndSwap(roundQueued, roundSent) {
			s.unsent(t) // its take gave up waiting
			t.done <- fmt.Errorf("owner take: partition %d: %w", t.partition, errAbandoned)
			return true
		}
		if t.epoch = t.p.takes.epoch.Load(); t.epoch == 0 {
			// its id could repeat one the relay has passed
			s.unsent(t)
			t.done <- fmt.Errorf("owner take: partition %d: the take stream went back, a new epoch is due: %w", t.partition, errNotAppended)
			return true
		}
		return false
	})
	if len(round) == 0 {
		return
	}
	pipe := s.cfg.Takes.Redis.Pipeline()
	cmds := make([]*redis.StringCmd, len(round))
	for k, t := range round {
		vals := make([]any, 0, 2*len(t.evs))
		for i, e := range t.evs {
			vals = append(vals, ownerTakeField+strconv.Itoa(i+1), e)
		}
		cmds[k] = pipe.XAdd(ctx, &redis.XAddArgs{Stream: keys.Takes(t.partition), ID: strconv.FormatInt(t.epoch, 10) + "-*", Values: vals})
	}
	start := time.Now()
	_, _ = pipe.Exec(ctx) // errors are read per command
	s.cfg.Applier.st.Observe("owner_take", start)
	for k, t := range round {
		t.p.appends.Done()
		switch err := cmds[k].Err(); {
		case isFenced(err):
			s.fenced(t.partition, t.p)
			t.done <- fmt.Errorf("owner take: partition %d: %w", t.partition, errTakeFenced)
			continue
		case err != nil:
			t.p.mu.Lock()
			s.appendFailed(t.p, t, err)
			t.p.mu.Unlock()
			t.done <- fmt.Errorf("owner take: append to partition %d's take stream: %w", t.partition, err)
			continue
		}
		if id, err := parseStreamID(cmds[k].Val()); err == nil {
			t.p.mu.Lock()
			s.noteAppend(t.partition, t.p, t, id)
			t.p.mu.Unlock()
		}
		t.done <- nil
	}
}

// drainRounds fails the rounds left queued when RunTakes stops: their
// takes are not appended, and their partitions' revokes need not wait.
func (s *Sink) drainRounds() {
	for {
		select {
		case t := <-s.rounds:
			s.unsent(t)
			t.done <- fmt.Errorf("owner take: stopping: %w", errNotAppended)
		default:
			return
		}
	}
}

// isFenced tells whether Redis refused an append for its id: a newer
// owner's fence moved the stream past this owner's epoch.
func isFenced(err error) bool {
	return err != nil && strings.Contains(err.Error(), "equal or smaller than the target stream top item")
}

// fenced closes the partition's takes for as long as its state lives: a
// newer owner answers them, and this one has not noticed yet that it
// lost the partition (cut off from the group, not from Redis).
func (s *Sink) fenced(partition int, p *partState) {
	p.mu.Lock()
	was := p.takes.fenced
	p.takes.fenced = true
	p.closeTakes()
	p.mu.Unlock()
	if !was {
		// The stream's ids moved past this owner's epoch: a newer owner's
		// fence, or a limiter's take script (`--rls-mode take`), whose
		// entries get ids of the current time, which must not run beside
		// owner takes.
		s.log.Warn("owner takes: the partition's take stream moved past this owner's epoch; this member answers its takes no more (it lost the partition and has not noticed yet, or a limiter with --rls-mode take appends to the same stream: stage A must not run beside --owner-takes)", "partition", partition)
	}
}

// unsent settles a round that was never sent: its takes leave the
// overlay, and its partition's revoke need not wait for it.
func (s *Sink) unsent(t *takeRound) {
	t.p.mu.Lock()
	for _, id := range t.ids {
		t.p.takes.ov.drop(id)
	}
	t.p.mu.Unlock()
	t.p.appends.Done()
}
