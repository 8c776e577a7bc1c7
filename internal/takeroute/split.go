package takeroute

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// A take across owners: its subjects' partitions have several owners (this
// member among them, perhaps). Each owner reserves its part (evaluated and
// held in its memory as a take it answered); once every part is admitted
// each is committed (appended), else the reserved ones are released. Both
// phases run owner by owner in the order of their addresses. A reservation
// counts in its owner's windows from the start, so overshoot stays 0; one
// whose taker disappears is released by its owner after live.ReserveTTL.

// ownerPart is one owner's part of a take across owners.
type ownerPart struct {
	addr   string // Self: this process
	qs     []int  // the take's queries, by index
	evs    []int  // the take's events, by index
	id     string // the reservation, once admitted
	queued []bool
	states []window.EvalState
}

// split answers a take whose queries' partitions addrs owns (one address
// per query) in two phases. An error after a commit may leave the take
// counted in part: it is answered closed, never forwarded again.
func (r *Router) split(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64, events []window.QueuedEvent, addrs []string) (bool, []bool, []window.EvalState, error) {
	parts := splitParts(qs, events, addrs)
	states := make([]window.EvalState, len(qs))
	for i, q := range qs {
		// a part not asked (one before it was refused) counts nothing
		states[i] = window.EvalState{Sums: make([]int64, len(q.Limits)), Until: make([]time.Time, len(q.Limits))}
	}
	admitted := true
	var err error
	for _, p := range parts {
		if err = r.reserve(ctx, now, p, qs, n, events); err != nil {
			break
		}
		for k, i := range p.qs {
			states[i] = p.states[k]
		}
		if p.id == "" {
			admitted = false
			break // refused: the rest need not be asked
		}
	}
	if err != nil || !admitted {
		r.releaseAll(ctx, parts)
		if err != nil {
			return false, nil, nil, err
		}
		return false, nil, states, nil
	}
	queued := make([]bool, len(events))
	for _, p := range parts {
		if cerr := r.commit(ctx, p); cerr != nil {
			// the parts committed before it stand: answered closed
			return false, nil, nil, fmt.Errorf("take router: a take across owners committed in part: %v", cerr)
		}
		for k, e := range p.evs {
			queued[e] = p.queued[k]
		}
	}
	return true, queued, states, nil
}

// splitParts groups the take's queries by owner, each owner's part with
// the events of its counted queries (by the subject's Kafka key, as the
// owner matches them); an event of no counted query goes to none.
func splitParts(qs []window.EvalQuery, events []window.QueuedEvent, addrs []string) []*ownerPart {
	byAddr := map[string]*ownerPart{}
	var parts []*ownerPart
	keys := map[string]*ownerPart{}
	for i, q := range qs {
		p := byAddr[addrs[i]]
		if p == nil {
			p = &ownerPart{addr: addrs[i]}
			byAddr[addrs[i]] = p
			parts = append(parts, p)
		}
		p.qs = append(p.qs, i)
		if q.Count {
			keys[q.Subject.Kind+":"+event.CanonicalSubject(q.Subject.Subject)] = p
		}
	}
	for k, e := range events {
		if p := keys[string(e.Key)]; p != nil {
			p.evs = append(p.evs, k)
		}
	}
	slices.SortFunc(parts, func(a, b *ownerPart) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	return parts
}

// reserve asks p's owner to reserve its part.
func (r *Router) reserve(ctx context.Context, now time.Time, p *ownerPart, qs []window.EvalQuery, n int64, events []window.QueuedEvent) error {
	sub := make([]window.EvalQuery, len(p.qs))
	for k, i := range p.qs {
		sub[k] = qs[i]
	}
	evs := make([]window.QueuedEvent, len(p.evs))
	for k, i := range p.evs {
		evs[k] = events[i]
	}
	if p.addr == r.cfg.Self {
		var err error
		p.id, p.queued, p.states, err = r.cfg.Local.Reserve(ctx, now, sub, n, evs)
		if err == nil && len(p.states) != len(sub) {
			err = fmt.Errorf("take router: reserve here: %d states for %d queries", len(p.states), len(sub))
		}
		return err
	}
	rep, states, err := r.call(ctx, p.addr, wireTake{Op: "reserve", Queries: sub, N: n, Events: evs})
	if err != nil {
		return err
	}
	p.id, p.queued, p.states = rep.ID, rep.Queued, states
	return nil
}

// commit asks p's owner to append its reserved part.
func (r *Router) commit(ctx context.Context, p *ownerPart) error {
	if p.addr == r.cfg.Self {
		return r.cfg.Local.Commit(ctx, p.id)
	}
	_, _, err := r.call(ctx, p.addr, wireTake{Op: "commit", ID: p.id})
	return err
}

// releaseAll gives the reserved parts' room back; one not released here
// is released by its owner after its deadline.
func (r *Router) releaseAll(ctx context.Context, parts []*ownerPart) {
	for _, p := range parts {
		if p.id == "" {
			continue
		}
		var err error
		if p.addr == r.cfg.Self {
			err = r.cfg.Local.Release(p.id)
		} else {
			_, _, err = r.call(context.WithoutCancel(ctx), p.addr, wireTake{Op: "release", ID: p.id})
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			r.log().Warn("take router: releasing a reservation failed; its owner releases it after its deadline", "owner", p.addr, "err", err)
		}
	}
}
