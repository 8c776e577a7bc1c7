package strict

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/internal/window"
)

// Store is what a Taker needs of the live store; *window.Store has it.
type Store interface {
	PartitionOf(sub window.Subject) (int, error)
	PartitionOfKey(key []byte) (int, error)
	TakeSlots(ctx context.Context, runs []window.SlotTakes) ([][]window.TakeResult, []error)
	Refund(ctx context.Context, partition int, now time.Time, qs []window.EvalQuery, n int64, entry string) (bool, error)
	Evaluate(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64) ([]window.EvalState, error)
}

var _ Store = (*window.Store)(nil)

// Config configures a Taker.
type Config struct {
	Store Store // required
	// MaxBatch caps the takes of one script run. Default 64.
	MaxBatch int
	// Pipelines is how many pipelines of script runs may be in flight at
	// once. Default 2: one fills while the other waits for Redis.
	Pipelines int
	// Timeout bounds one script run (it is not retried: a run whose reply
	// is lost may have counted). Default 1s.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Taker runs strict takes: check and count in one atomic script per Redis
// slot, zero overshoot.
//
// Concurrent takes are queued and sent together: those of one slot in one
// script run, in arrival order (a later take sees the counts of the
// earlier ones), and the runs of every slot in one pipeline, so a burst
// costs one round trip and one write on each side, not one per take or
// per slot — as envoyproxy/ratelimit pipelines its commands. A take never
// waits for company: a pipeline leaves with whatever is queued as soon as
// a pipeline slot is free (Config.Pipelines).
//
// A take whose subjects fall in several slots (a partition each) reserves
// in every slot and refunds the slots that took when another refused:
// all or nothing, and never an overshoot, since a reservation counts from
// the moment it is made. The price is on the conservative side: a
// concurrent take may see another's reservation that is later refunded and
// be refused; and a limiter that dies between a reservation and its refund
// leaves the reservation counted (the subject loses that slot until its
// window passes).
type Taker struct {
	cfg   Config
	log   *slog.Logger
	queue chan *pending
	start sync.Once
}

// New returns a Taker.
func New(cfg Config) (*Taker, error) {
	if cfg.Store == nil {
		return nil, errors.New("strict: nil store")
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 64
	}
	if cfg.Pipelines <= 0 {
		cfg.Pipelines = 2
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Taker{cfg: cfg, log: cfg.Logger, queue: make(chan *pending, 4*cfg.MaxBatch)}, nil
}

// pending is one slot's part of a take, waiting for its run.
type pending struct {
	ctx  context.Context
	part int
	now  time.Time
	req  window.TakeRequest
	done chan result
}

type result struct {
	res window.TakeResult
	now time.Time // the clock the run used
	err error
}

// Take checks qs for n more events and, unless one blocks, counts n for
// the subjects marked Count: all or nothing across slots. States are the
// sums before the take, in qs order (zero for slots not reached). An error
// means nothing is known of the take: it may have counted (fail closed).
//
// Slots are taken one after another in partition order, each only once
// the one before took, and refunded in reverse when one refuses: every
// take meets the slots in the same order, so under contention the takes a
// first slot admits are the ones that compete for the next, and a burst
// admits as many as the tightest slot allows rather than starving on
// reservations that another slot refuses.
func (t *Taker) Take(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64) (bool, []window.EvalState, error) {
	taken, _, states, err := t.TakeQueued(ctx, now, qs, n, nil)
	return taken, states, err
}

// TakeQueued is Take that also hands the take's events to the take streams,
// in the script runs that count them (window.TakeRequest.Events): each
// event to its own partition's slot, where the partition owner publishes
// it (live.TakeRelay), exactly once. queued tells, event by event, which
// are there: the caller publishes the others of a take that counted (a
// full stream, or an event keyed to a partition none of qs is in).
//
// A take spanning several slots queues in each as it reserves there; a
// refund takes the slot's entry back with its count, unless the relay
// already has it: then the reservation stays counted, as a refund that
// failed leaves it, and its events go out with it.
func (t *Taker) TakeQueued(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64, events []window.QueuedEvent) (taken bool, queued []bool, states []window.EvalState, err error) {
	groups := map[int][]int{}
	for i, q := range qs {
		p, err := t.cfg.Store.PartitionOf(q.Subject)
		if err != nil {
			return false, nil, nil, err
		}
		groups[p] = append(groups[p], i)
	}
	evs, evIdx, err := t.eventsBySlot(groups, events)
	if err != nil {
		return false, nil, nil, err
	}
	parts := make([]int, 0, len(groups))
	for p := range groups {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	states = make([]window.EvalState, len(qs))
	var held []reservation
	for _, p := range parts {
		idx := groups[p]
		sub := make([]window.EvalQuery, len(idx))
		for k, i := range idx {
			sub[k] = qs[i]
		}
		r := t.submit(ctx, p, now, window.TakeRequest{Queries: sub, N: n, Events: evs[p]})
		if r.err != nil {
			return false, nil, nil, errors.Join(r.err, t.refund(ctx, held, n))
		}
		for k, i := range idx {
			states[i] = r.res.States[k]
		}
		if !r.res.Taken {
			if err := t.refund(ctx, held, n); err != nil {
				return false, nil, nil, err
			}
			return false, nil, states, t.fill(ctx, now, qs, states, n)
		}
		held = append(held, reservation{part: p, qs: sub, now: r.now, entry: r.res.Entry})
	}
	if events != nil {
		queued = make([]bool, len(events))
		for _, h := range held {
			if h.entry != "" {
				for _, i := range evIdx[h.part] {
					queued[i] = true
				}
			}
		}
	}
	return true, queued, states, nil
}

// reservation is one slot's part of a take that counted there.
type reservation struct {
	part  int
	qs    []window.EvalQuery
	now   time.Time
	entry string // the take stream entry of its events; "" for none
}

// eventsBySlot sorts a take's events by the partition of their keys, among
// the take's own slots (groups): an event of another partition is left
// to the caller.
func (t *Taker) eventsBySlot(groups map[int][]int, events []window.QueuedEvent) (map[int][]window.QueuedEvent, map[int][]int, error) {
	evs, idx := map[int][]window.QueuedEvent{}, map[int][]int{}
	for i, e := range events {
		p, err := t.cfg.Store.PartitionOfKey(e.Key)
		if err != nil {
			return nil, nil, err
		}
		if _, ok := groups[p]; ok {
			evs[p] = append(evs[p], e)
			idx[p] = append(idx[p], i)
		}
	}
	return evs, idx, nil
}

// refund takes back the reservations held, the last first.
func (t *Taker) refund(ctx context.Context, held []reservation, n int64) error {
	var errs []error
	for i := len(held) - 1; i >= 0; i-- {
		r := held[i]
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.Timeout)
		refunded, err := t.cfg.Store.Refund(rctx, r.part, r.now, r.qs, n, r.entry)
		cancel()
		switch {
		case err != nil:
			t.log.Error("strict take: refund failed; the reservation stays counted", "partition", r.part, "n", n, "err", err)
			errs = append(errs, err)
		case !refunded:
			t.log.Warn("strict take: the take relay had the take's events before another slot refused it; the reservation stays counted, as they are published",
				"partition", r.part, "entry", r.entry, "n", n)
		}
	}
	return errors.Join(errs...)
}

// fill evaluates, without taking, the subjects of the slots a refused take
// did not reach, so that the caller can report all of them.
func (t *Taker) fill(ctx context.Context, now time.Time, qs []window.EvalQuery, states []window.EvalState, n int64) error {
	var rest []window.EvalQuery
	var idx []int
	for i := range states {
		if states[i].Sums == nil {
			rest = append(rest, qs[i])
			idx = append(idx, i)
		}
	}
	if len(rest) == 0 {
		return nil
	}
	got, err := t.cfg.Store.Evaluate(ctx, now, rest, n)
	if err != nil {
		return err
	}
	for k, i := range idx {
		states[i] = got[k]
	}
	return nil
}

// submit queues one slot's take and waits for its run.
func (t *Taker) submit(ctx context.Context, part int, now time.Time, req window.TakeRequest) result {
	t.start.Do(func() {
		for range t.cfg.Pipelines {
			go t.run()
		}
	})
	p := &pending{ctx: ctx, part: part, now: now, req: req, done: make(chan result, 1)}
	select {
	case t.queue <- p:
	case <-ctx.Done():
		return result{err: fmt.Errorf("strict take partition=%d: %w", part, context.Cause(ctx))}
	}
	select {
	case r := <-p.done:
		return r
	case <-ctx.Done():
		// The run may still count: the caller fails closed, and a
		// reservation it cannot refund stays counted (conservative).
		return result{err: fmt.Errorf("strict take partition=%d: %w", part, context.Cause(ctx))}
	}
}

// run sends what is queued, a pipeline at a time. Pipelines goroutines run
// it for the life of the process.
func (t *Taker) run() {
	limit := 4 * t.cfg.MaxBatch
	batch := make([]*pending, 0, limit)
	for {
		batch = append(batch[:0], <-t.queue)
	fill:
		for len(batch) < limit {
			select {
			case p := <-t.queue:
				batch = append(batch, p)
			default:
				break fill
			}
		}
		t.runBatch(batch)
	}
}

// runBatch groups a pipeline's takes into script runs, one per slot and
// clock second in order of arrival, at most MaxBatch takes each: a run
// counts at one second, so every take counts at its own.
func (t *Taker) runBatch(batch []*pending) {
	type key struct {
		part int
		sec  int64
	}
	var runs []window.SlotTakes
	var members [][]*pending
	open := map[key]int{}
	for _, p := range batch {
		// Takes whose caller gave up before the run are not run at all.
		if err := p.ctx.Err(); err != nil {
			p.done <- result{err: fmt.Errorf("strict take partition=%d: %w", p.part, context.Cause(p.ctx))}
			continue
		}
		k := key{p.part, p.now.Unix()}
		i, ok := open[k]
		if !ok || len(members[i]) == t.cfg.MaxBatch {
			i = len(runs)
			open[k] = i
			runs = append(runs, window.SlotTakes{Partition: p.part, Now: p.now})
			members = append(members, nil)
		}
		runs[i].Reqs = append(runs[i].Reqs, p.req)
		members[i] = append(members[i], p)
	}
	if len(runs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
	res, errs := t.cfg.Store.TakeSlots(ctx, runs)
	cancel()
	for i, ps := range members {
		for k, p := range ps {
			if errs[i] != nil {
				p.done <- result{err: errs[i], now: runs[i].Now}
				continue
			}
			p.done <- result{res: res[i][k], now: runs[i].Now}
		}
	}
}
