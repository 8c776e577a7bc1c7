package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/producer"
)

// Source yields events: Synthetic and NDJSON. Next returns io.EOF at the
// end; a *LineError is a skipped input, not the end.
type Source interface {
	Next(now time.Time) (event.Event, error)
}

// Publisher receives the events (producer.Publisher).
type Publisher interface {
	Publish(ctx context.Context, events ...event.Event) error
}

var (
	_ Source    = (*Synthetic)(nil)
	_ Source    = (*NDJSON)(nil)
	_ Publisher = (*producer.Publisher)(nil)
)

// PumpConfig says how much to send and how fast. Without Count and
// Duration, the pump runs until its source ends or its context is done.
type PumpConfig struct {
	// Count stops the pump after this many events. Default 0: no limit.
	Count int64
	// Duration stops the pump after this long. Default 0: no limit.
	Duration time.Duration
	// Rate is the target events per second. Default 0: as fast as possible.
	Rate float64
	// Batch is the most events per Publish call. Default 1000, or about
	// 10ms worth of events when Rate is set, so pacing stays smooth.
	Batch int
	// OnBadInput is called with each skipped input (a *LineError).
	// Default: ignore (they are counted in Counts.Bad either way).
	OnBadInput func(error)
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Sleep waits for d or until ctx is done. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Validate reports negative or contradictory settings.
func (c PumpConfig) Validate() error {
	var errs []error
	if c.Count < 0 {
		errs = append(errs, fmt.Errorf("count %d: must not be negative", c.Count))
	}
	if c.Duration < 0 {
		errs = append(errs, fmt.Errorf("duration %v: must not be negative", c.Duration))
	}
	if c.Rate < 0 {
		errs = append(errs, fmt.Errorf("rate %v: must not be negative", c.Rate))
	}
	if c.Batch < 0 {
		errs = append(errs, fmt.Errorf("batch %d: must not be negative", c.Batch))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pump config: %w", err)
	}
	return nil
}

func (c PumpConfig) withDefaults() PumpConfig {
	if c.Batch == 0 {
		c.Batch = 1000
		if c.Rate > 0 {
			c.Batch = int(min(max(c.Rate/100, 1), 1000))
		}
	}
	if c.OnBadInput == nil {
		c.OnBadInput = func(error) {}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = sleep
	}
	return c
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Counts are a pump's progress.
type Counts struct {
	Sent int64 // handed to the publisher without error
	Bad  int64 // inputs skipped (bad NDJSON lines)
}

// Pump moves events from a Source to a Publisher.
type Pump struct {
	cfg  PumpConfig
	src  Source
	pub  Publisher
	sent atomic.Int64
	bad  atomic.Int64
}

// NewPump validates cfg and returns a pump.
func NewPump(cfg PumpConfig, src Source, pub Publisher) (*Pump, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Pump{cfg: cfg.withDefaults(), src: src, pub: pub}, nil
}

// Counts may be called while Run runs.
func (p *Pump) Counts() Counts {
	return Counts{Sent: p.sent.Load(), Bad: p.bad.Load()}
}

// Run sends events until Count, Duration, the end of the source, or ctx
// is done (which is a normal stop: Run returns nil). It returns the first
// error of the source (other than bad inputs) or of Publish.
func (p *Pump) Run(ctx context.Context) error {
	start := p.cfg.Now()
	var deadline time.Time
	if p.cfg.Duration > 0 {
		deadline = start.Add(p.cfg.Duration)
	}
	batch := make([]event.Event, 0, p.cfg.Batch)
	var total int64 // events generated, sent or being sent
	for {
		if ctx.Err() != nil {
			return nil
		}
		now := p.cfg.Now()
		if !deadline.IsZero() && !now.Before(deadline) {
			return nil
		}
		want := int64(p.cfg.Batch)
		if p.cfg.Count > 0 {
			want = min(want, p.cfg.Count-total)
			if want <= 0 {
				return nil
			}
		}
		if p.cfg.Rate > 0 {
			// Pace: event number total+want is due at start + (total+want)/Rate.
			due := start.Add(time.Duration(math.Ceil(float64(total+want) / p.cfg.Rate * float64(time.Second))))
			if wait := due.Sub(now); wait > 0 {
				if err := p.cfg.Sleep(ctx, wait); err != nil {
					return nil // ctx done
				}
				now = p.cfg.Now()
			}
		}
		batch = batch[:0]
		ended := false
		for int64(len(batch)) < want {
			e, err := p.src.Next(now)
			var lineErr *LineError
			switch {
			case err == nil:
				batch = append(batch, e)
				continue
			case errors.As(err, &lineErr):
				p.bad.Add(1)
				p.cfg.OnBadInput(err)
				continue
			case errors.Is(err, io.EOF):
				ended = true
			default:
				return fmt.Errorf("read events after %d sent: %w", p.sent.Load(), err)
			}
			break
		}
		if len(batch) > 0 {
			if err := p.pub.Publish(ctx, batch...); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("publish after %d sent: %w", p.sent.Load(), err)
			}
			p.sent.Add(int64(len(batch)))
			total += int64(len(batch))
		}
		if ended {
			return nil
		}
	}
}
