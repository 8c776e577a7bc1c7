package live

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/internal/window"
)

// Takes across owners. A take whose subjects' partitions have different
// owners is taken in two phases, by the member that received it (package
// takeroute): each owner reserves its part (Reserve: evaluated and added
// to its overlay as a take it answered, nothing appended), and once every
// part is admitted each is committed (Commit: appended, as a take is),
// else the admitted ones are released (Release). A reservation counts in
// its owner's windows from the start, so no take admitted meanwhile can
// use its room: overshoot stays 0. One left neither committed nor
// released (its taker gone) is released after ReserveTTL.

// ReserveTTL is how long a reservation waits for its commit.
const ReserveTTL = 5 * time.Second

// maxReservations bounds the reservations waiting at once.
const maxReservations = 10_000

// reservation is a part of a take admitted and not yet appended.
type reservation struct {
	byQuery  []*queuedEvent
	groups   map[int][]int
	parts    []int
	held     []*partState
	deadline time.Time
}

// ErrNoReservation is a commit or release of a reservation this owner does
// not hold (released after ReserveTTL, or never made).
var ErrNoReservation = errors.New("no such reservation")

// Reserve evaluates a part of a take as TakeQueued does and, when every
// limit admits it, holds it in the overlay under the id it returns ("" when
// not admitted) until Commit or Release.
func (s *Sink) Reserve(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64, events []window.QueuedEvent) (string, []bool, []window.EvalState, error) {
	if s.cfg.Takes == nil {
		return "", nil, nil, errors.New("live sink: owner takes are off")
	}
	if err := checkTakeN(n); err != nil {
		return "", nil, nil, err
	}
	byQuery, queued, err := matchEvents(qs, events)
	if err != nil {
		return "", nil, nil, err
	}
	groups, parts, err := s.byPartition(qs)
	if err != nil {
		return "", nil, nil, err
	}
	s.resMu.Lock()
	full := len(s.reservations) >= maxReservations
	s.resMu.Unlock()
	if full {
		return "", nil, nil, fmt.Errorf("owner take: %d reservations wait for their commit: %w", maxReservations, ErrNotOwner)
	}
	states, held, err := s.admit(ctx, now, qs, n, byQuery, groups, parts)
	if err != nil || held == nil {
		s.m.ownerTakes.WithLabelValues(takeResult(false, err)).Inc()
		return "", nil, states, err
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	s.resMu.Lock()
	s.reservations[id] = &reservation{byQuery: byQuery, groups: groups, parts: parts, held: held, deadline: s.cfg.Now().Add(ReserveTTL)}
	s.resMu.Unlock()
	return id, queued, states, nil
}

// Commit appends a reserved part: its answer is the take's, as
// TakeQueued's would be.
func (s *Sink) Commit(ctx context.Context, id string) error {
	r := s.claimReservation(id)
	if r == nil {
		return fmt.Errorf("owner take: commit %s: %w", id, ErrNoReservation)
	}
	err := s.appendTakes(ctx, r.byQuery, r.groups, r.parts, r.held)
	s.m.ownerTakes.WithLabelValues(takeResult(err == nil, err)).Inc()
	return err
}

// Release gives a reserved part's room back.
func (s *Sink) Release(id string) error {
	r := s.claimReservation(id)
	if r == nil {
		return fmt.Errorf("owner take: release %s: %w", id, ErrNoReservation)
	}
	s.release(r)
	s.m.ownerTakes.WithLabelValues("released").Inc()
	return nil
}

func (s *Sink) claimReservation(id string) *reservation {
	s.resMu.Lock()
	defer s.resMu.Unlock()
	r := s.reservations[id]
	delete(s.reservations, id)
	return r
}

// release drops a reservation's takes from their overlays: never appended.
func (s *Sink) release(r *reservation) {
	for k, part := range r.parts {
		p := r.held[k]
		p.mu.Lock()
		held := false
		for _, i := range r.groups[part] {
			if e := r.byQuery[i]; e != nil {
				p.takes.ov.drop(e.id)
				held = true
			}
		}
		p.mu.Unlock()
		if held {
			p.appends.Done() // admit noted its append as pending
		}
	}
}

// expireReservations releases the reservations past their deadline: their
// takers are gone.
func (s *Sink) expireReservations() {
	now := s.cfg.Now()
	var gone []*reservation
	s.resMu.Lock()
	for id, r := range s.reservations {
		if now.After(r.deadline) {
			gone = append(gone, r)
			delete(s.reservations, id)
		}
	}
	s.resMu.Unlock()
	for _, r := range gone {
		s.release(r)
	}
	if len(gone) > 0 {
		s.log.Warn("owner takes: reservations released uncommitted after their deadline (their takers are gone)", "reservations", len(gone), "ttl", ReserveTTL)
	}
}
