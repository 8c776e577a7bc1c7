package live

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// takeRound is one partition's part of an admitted take: the append of
// its events.
type takeRound struct {
	partition int
	p         *partState // its appends count this round until it has run
	evs       []string   // "<key length>:<key><value>" each
	done      chan error
}

// appendTakes appends the take's events to their partitions' take streams,
// one entry per partition, and waits for every reply (an error: the first).
// held are the partitions admit took them in, whose pending appends each
// round settles once it has run (or here, a round never handed over).
func (s *Sink) appendTakes(ctx context.Context, byQuery []*queuedEvent, groups map[int][]int, parts []int, held []*partState) error {
	var rounds []*takeRound
	for k, part := range parts {
		t := &takeRound{partition: part, p: held[k], done: make(chan error, 1)}
		for _, i := range groups[part] {
			if e := byQuery[i]; e != nil {
				t.evs = append(t.evs, e.enc)
			}
		}
		if len(t.evs) > 0 { // else nothing counted in this partition
			rounds = append(rounds, t)
		}
	}
	for k, t := range rounds {
		var err error
		select {
		case s.rounds <- t:
			continue
		case <-t.p.stopped:
			err = fmt.Errorf("partition %d: %w", t.partition, ErrNotOwner)
		case <-ctx.Done():
			err = fmt.Errorf("owner take: %w", context.Cause(ctx))
		}
		for _, u := range rounds[k:] {
			u.p.appends.Done() // never handed over: nothing to wait for
		}
		return err
	}
	var first error
	for _, t := range rounds {
		var err error
		select {
		case err = <-t.done:
		case <-t.p.stopped:
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
			s.drainRounds()
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
		t.p.appends.Done()
		if err := cmds[k].Err(); err != nil {
			t.done <- fmt.Errorf("owner take: append to partition %d's take stream: %w", t.partition, err)
			continue
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
			t.p.appends.Done()
			t.done <- fmt.Errorf("owner take: stopping: %w", ErrNotOwner)
		default:
			return
		}
	}
}
