package rlsload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Op is one lookup. It reports whether the answer was the one the scenario
// expects (an RLS code, an HTTP status), or an error when there was none.
// Calls come from many goroutines; worker is the caller's index and rng its
// own source.
type Op func(ctx context.Context, worker int, rng *rand.Rand) (expected bool, err error)

// Config configures one Run.
type Config struct {
	// Op is called for each lookup. Required.
	Op Op
	// Concurrency is the number of callers of a closed loop, each calling
	// again as soon as it is answered. Used when Rate is 0.
	Concurrency int
	// Rate, when positive, makes the run an open loop: lookups are
	// scheduled at this fixed rate (per second) whatever the answers, and
	// each latency runs from the lookup's scheduled time, so a server that
	// stalls is charged for the queue it causes (no coordinated omission).
	Rate float64
	// Workers carry a paced run's lookups: the most in flight at once; the
	// others wait in the queue, and their wait counts. Default 512.
	Workers int
	// Duration that is measured. Default 3s.
	Duration time.Duration
	// Warmup runs the same load before the measured part, unrecorded
	// (connections, pools and caches settle). Default Duration/5, at most
	// 1s; negative: none.
	Warmup time.Duration
	// Timeout of one lookup. Default 5s.
	Timeout time.Duration
}

func (c *Config) validate() error {
	switch {
	case c.Op == nil:
		return errors.New("rls load: no op")
	case c.Rate < 0:
		return fmt.Errorf("rls load: rate %v is negative", c.Rate)
	case c.Rate == 0 && c.Concurrency < 1:
		return fmt.Errorf("rls load: concurrency %d, want at least 1 (or a rate)", c.Concurrency)
	case c.Duration < 0 || c.Workers < 0 || c.Timeout < 0:
		return errors.New("rls load: negative duration, workers or timeout")
	}
	if c.Duration == 0 {
		c.Duration = 3 * time.Second
	}
	if c.Warmup == 0 {
		c.Warmup = min(c.Duration/5, time.Second)
	}
	c.Warmup = max(c.Warmup, 0)
	if c.Workers == 0 {
		c.Workers = 512
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	return nil
}

// Result is one run's figures. Only lookups started (closed loop) or
// scheduled (paced) in the measured part count.
type Result struct {
	// Concurrency of a closed loop; 0 for a paced run.
	Concurrency int
	// Rate offered by a paced run; 0 for a closed loop.
	Rate float64
	// Ops answered, of which Unexpected with another answer than the
	// scenario's (a denial where an allow was expected, a degraded take);
	// Errors are lookups without an answer (not in the latencies).
	Ops, Unexpected, Errors int64
	// FirstError is the first error's text, for the report.
	FirstError string
	// PerSec is answers per second: over the measured duration for a closed
	// loop, up to the last answer for a paced run (the offered rate when the
	// server keeps up).
	PerSec float64
	// Latency percentiles of the answered lookups, and the largest.
	P50, P99, P999, Max time.Duration
}

// Paced reports whether the run was an open loop.
func (r Result) Paced() bool { return r.Rate > 0 }

// Run measures one load and returns its figures; it ends early, with what
// it measured, when ctx ends.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	rec := newRecorder()
	res := Result{Concurrency: cfg.Concurrency}
	var measured time.Duration
	if cfg.Rate > 0 {
		res = Result{Rate: cfg.Rate}
		measured = paced(ctx, cfg, rec)
	} else {
		measured = closed(ctx, cfg, rec)
	}
	rec.fill(&res, measured)
	return res, ctx.Err()
}

// closed runs cfg.Concurrency callers in a loop; lookups that start in the
// measured part are recorded. It returns the measured duration.
func closed(ctx context.Context, cfg Config, rec *recorder) time.Duration {
	start := time.Now()
	from := start.Add(cfg.Warmup)
	end := from.Add(cfg.Duration)
	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				ok, err := call(ctx, cfg, w, rng)
				if !t0.Before(from) {
					rec.add(w, time.Since(t0), ok, err)
				}
			}
		}()
	}
	wg.Wait()
	return min(time.Since(from), cfg.Duration)
}

// paced schedules lookups every 1/Rate from the start; workers take them
// in order and each latency runs from the schedule, so time spent queued
// behind a slow answer counts. It returns the time from the measured
// part's start to the last answer.
func paced(ctx context.Context, cfg Config, rec *recorder) time.Duration {
	start := time.Now()
	from := start.Add(cfg.Warmup)
	end := from.Add(cfg.Duration)
	queue := make(chan time.Time, 1<<16)
	var last time.Time
	var lastMu sync.Mutex
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			for due := range queue {
				ok, err := call(ctx, cfg, w, rng)
				done := time.Now()
				if due.Before(from) {
					continue
				}
				rec.add(w, done.Sub(due), ok, err)
				lastMu.Lock()
				if done.After(last) {
					last = done
				}
				lastMu.Unlock()
			}
		}()
	}
	// The dispatcher sleeps until the next due time and then queues every
	// lookup that is due: a late wake-up sends a burst, as a steady client
	// population would, instead of shifting the schedule.
	every := float64(time.Second) / cfg.Rate
	for i := 0; ctx.Err() == nil; {
		due := start.Add(time.Duration(float64(i) * every))
		if !due.Before(end) {
			break
		}
		if wait := time.Until(due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		queue <- due
		i++
	}
	close(queue)
	wg.Wait()
	if last.IsZero() {
		return 0
	}
	return last.Sub(from)
}

func call(ctx context.Context, cfg Config, w int, rng *rand.Rand) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	return cfg.Op(ctx, w, rng)
}

// shards of a recorder: callers of different shards never wait for each
// other, and a few histograms stay small (one is ~200 KiB).
const shards = 16

// recorder holds the latencies (microseconds, 1µs to 1min, 3 significant
// digits) and counts of a run.
type recorder struct {
	shard [shards]struct {
		mu               sync.Mutex
		h                *hdrhistogram.Histogram
		unexpected, errs int64
		firstErr         error
	}
}

const maxMicros = int64(time.Minute / time.Microsecond)

func newRecorder() *recorder {
	r := &recorder{}
	for i := range r.shard {
		r.shard[i].h = hdrhistogram.New(1, maxMicros, 3)
	}
	return r
}

func (r *recorder) add(worker int, d time.Duration, ok bool, err error) {
	s := &r.shard[worker%shards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs++
		if s.firstErr == nil {
			s.firstErr = err
		}
		return
	}
	if !ok {
		s.unexpected++
	}
	// RecordValue fails only out of range: clamp instead of losing it.
	_ = s.h.RecordValue(min(max(int64(d/time.Microsecond), 1), maxMicros))
}

// merged returns every shard's histogram in one, and the counts.
func (r *recorder) merged() (*hdrhistogram.Histogram, int64, int64, error) {
	all := hdrhistogram.New(1, maxMicros, 3)
	var unexpected, errs int64
	var first error
	for i := range r.shard {
		s := &r.shard[i]
		s.mu.Lock()
		all.Merge(s.h)
		unexpected += s.unexpected
		errs += s.errs
		if first == nil {
			first = s.firstErr
		}
		s.mu.Unlock()
	}
	return all, unexpected, errs, first
}

// fill sets res's counts and latencies, and its rate over measured.
func (r *recorder) fill(res *Result, measured time.Duration) {
	h, unexpected, errs, first := r.merged()
	if measured > 0 {
		res.PerSec = float64(h.TotalCount()) / measured.Seconds()
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	res.Ops, res.Unexpected, res.Errors = h.TotalCount(), unexpected, errs
	if first != nil {
		res.FirstError = first.Error()
	}
	res.P50, res.P99, res.P999 = us(h.ValueAtPercentile(50)), us(h.ValueAtPercentile(99)), us(h.ValueAtPercentile(99.9))
	res.Max = us(h.Max())
}
