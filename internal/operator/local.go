package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// SnapshotChecker answers checks as a limiter that has caught up with the
// change streams would: each check loads the snapshots of its subjects'
// partitions into a fresh limiter memory and decides with the limiter's
// own logic (exact checks read Redis). It is the Checker of `floodgate
// inspect`, which runs no limiter of its own.
type SnapshotChecker struct {
	store   SnapshotStore
	rules   func() *rules.Set
	timeout time.Duration
	now     func() time.Time
}

var _ Checker = (*SnapshotChecker)(nil)

// SnapshotStore is what a SnapshotChecker reads of the live store: where a
// subject lives, a partition's snapshot, and what exact checks read
// (decide.Store). *window.Store has it.
type SnapshotStore interface {
	decide.Store
	PartitionOf(sub window.Subject) (int, error)
	Snapshot(ctx context.Context, partition int, now time.Time) (window.Snapshot, error)
}

var _ SnapshotStore = (*window.Store)(nil)

// NewSnapshotChecker returns a SnapshotChecker over store (which must know
// the partition count); timeout bounds each Redis read (0: 5s).
func NewSnapshotChecker(store SnapshotStore, rules func() *rules.Set, timeout time.Duration) *SnapshotChecker {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &SnapshotChecker{store: store, rules: rules, timeout: timeout, now: time.Now}
}

// Check implements Checker.
func (c *SnapshotChecker) Check(ctx context.Context, req limitapi.Request) (limitapi.Decision, error) {
	state := decide.NewState()
	now := c.now()
	set := c.rules()
	loaded := map[int]bool{}
	for _, s := range req.Subjects {
		// the partition of the subject as the limiter will look it up (an
		// e-mail normalized, IPv6 by prefix, else its digest)
		sub := event.CanonicalSubject(set.Subject(s.Kind, s.Subject))
		p, err := c.store.PartitionOf(window.Subject{Action: req.Action, Kind: s.Kind, Subject: sub})
		if err != nil {
			return limitapi.Decision{}, err
		}
		if loaded[p] {
			continue
		}
		snap, err := c.store.Snapshot(ctx, p, now)
		if err != nil {
			return limitapi.Decision{}, fmt.Errorf("load memory of partition %d: %w", p, err)
		}
		state.Reset(p, snap)
		loaded[p] = true
	}
	lim, err := decide.New(decide.Config{
		Store: c.store, State: state, Partitions: func() int { return len(loaded) }, Rules: c.rules,
		Timeout: c.timeout, FailureMode: decide.FailClosed, Now: func() time.Time { return now },
	})
	if err != nil {
		return limitapi.Decision{}, err
	}
	return lim.Check(ctx, req)
}
