package strict

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"floodgate/window"
)

// Store is what a Taker needs of the live store; *window.Store has it.
type Store interface {
	PartitionOf(sub window.Subject) (int, error)
	TakeSlot(ctx context.Context, partition int, now time.Time, reqs []window.TakeRequest) ([]window.TakeResult, error)
	Refund(ctx context.Context, partition int, now time.Time, qs []window.EvalQuery, n int64) error
	Evaluate(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64) ([]window.EvalState, error)
}

var _ Store = (*window.Store)(nil)

// Config configures a Taker.
type Config struct {
	Store Store // required
	// MaxBatch caps the takes of one script run. Default 64.
	MaxBatch int
	// Timeout bounds one script run (it is not retried: a run whose reply
	// is lost may have counted). Default 1s.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Taker runs strict takes: check and count in one atomic script per Redis
// slot, zero overshoot.
//
// Concurrent takes of one slot are queued and run together, in arrival
// order, in one script run (a later take sees the counts of the earlier
// ones), so a burst costs one round trip and one script call, not one per
// take — as envoyproxy/ratelimit pipelines its commands.
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
	mu    sync.Mutex
	slots map[int]chan *pending
}

// New returns a Taker.
func New(cfg Config) (*Taker, error) {
	if cfg.Store == nil {
		return nil, errors.New("strict: nil store")
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 64
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Taker{cfg: cfg, log: cfg.Logger, slots: map[int]chan *pending{}}, nil
}

// pending is one slot's part of a take, waiting for its run.
type pending struct {
	ctx  context.Context
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
	groups := map[int][]int{}
	for i, q := range qs {
		p, err := t.cfg.Store.PartitionOf(q.Subject)
		if err != nil {
			return false, nil, err
		}
		groups[p] = append(groups[p], i)
	}
	parts := make([]int, 0, len(groups))
	for p := range groups {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	states := make([]window.EvalState, len(qs))
	type reserved struct {
		part int
		qs   []window.EvalQuery
		now  time.Time
	}
	var held []reserved
	refund := func() error {
		var errs []error
		for i := len(held) - 1; i >= 0; i-- {
			r := held[i]
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.Timeout)
			if err := t.cfg.Store.Refund(rctx, r.part, r.now, r.qs, n); err != nil {
				t.log.Error("strict take: refund failed; the reservation stays counted", "partition", r.part, "n", n, "err", err)
				errs = append(errs, err)
			}
			cancel()
		}
		return errors.Join(errs...)
	}
	for _, p := range parts {
		idx := groups[p]
		sub := make([]window.EvalQuery, len(idx))
		for k, i := range idx {
			sub[k] = qs[i]
		}
		r := t.submit(ctx, p, now, window.TakeRequest{Queries: sub, N: n})
		if r.err != nil {
			return false, nil, errors.Join(r.err, refund())
		}
		for k, i := range idx {
			states[i] = r.res.States[k]
		}
		if !r.res.Taken {
			if err := refund(); err != nil {
				return false, nil, err
			}
			return false, states, t.fill(ctx, now, qs, states, n)
		}
		held = append(held, reserved{part: p, qs: sub, now: r.now})
	}
	return true, states, nil
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
	p := &pending{ctx: ctx, now: now, req: req, done: make(chan result, 1)}
	select {
	case t.queue(part) <- p:
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

func (t *Taker) queue(part int) chan *pending {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.slots[part]
	if q == nil {
		q = make(chan *pending, 4*t.cfg.MaxBatch)
		t.slots[part] = q
		go t.run(part, q)
	}
	return q
}

// run takes the takes queued for one slot, a run at a time. It lives as
// long as the process: one goroutine per slot in use.
//
// A run counts at one clock second, its first take's: takes of another
// second wait for the next run, so every take counts at its own second.
func (t *Taker) run(part int, q chan *pending) {
	batch := make([]*pending, 0, t.cfg.MaxBatch)
	var carry *pending
	for {
		first := carry
		carry = nil
		if first == nil {
			first = <-q
		}
		batch = append(batch[:0], first)
		sec := first.now.Unix()
	fill:
		for len(batch) < t.cfg.MaxBatch {
			select {
			case p := <-q:
				if p.now.Unix() != sec {
					carry = p
					break fill
				}
				batch = append(batch, p)
			default:
				break fill
			}
		}
		t.runBatch(part, batch)
	}
}

func (t *Taker) runBatch(part int, batch []*pending) {
	// Takes whose caller gave up before the run are not run at all.
	live := batch[:0]
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.done <- result{err: fmt.Errorf("strict take partition=%d: %w", part, context.Cause(p.ctx))}
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	now := live[0].now // the same second as every other take of the run
	reqs := make([]window.TakeRequest, len(live))
	for i, p := range live {
		reqs[i] = p.req
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
	res, err := t.cfg.Store.TakeSlot(ctx, part, now, reqs)
	cancel()
	for i, p := range live {
		if err != nil {
			p.done <- result{err: err, now: now}
			continue
		}
		p.done <- result{res: res[i], now: now}
	}
}
