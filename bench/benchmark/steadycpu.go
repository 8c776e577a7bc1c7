package benchmark

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/floodgate-dev/floodgate/bench/harness"
)

// SteadyCPU is where the CPU of one kind of steady-state run went, per
// event, one value per run (µs): the consumer's own process, the Kafka
// broker serving its fetches, and Redis (the live aggregator's only). Set
// against the machine's cores, the sum bounds the rate that consumer could
// reach here at best, so the live goal (a share of ConsumerPerformance's
// rate) becomes a budget in µs per event that each part's cost can be read
// against.
type SteadyCPU struct {
	Consumer, Broker, Redis []float64
}

// add appends one run's figures, µs per event.
func (s *SteadyCPU) add(consumer, broker, redis float64) {
	s.Consumer = append(s.Consumer, consumer)
	s.Broker = append(s.Broker, broker)
	s.Redis = append(s.Redis, redis)
}

// perEvent is d in µs per event (0 for no events).
func perEvent(d time.Duration, events int) float64 {
	if events <= 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(events)
}

// sum is the medians' sum.
func (s SteadyCPU) sum() float64 {
	return harness.Median(s.Consumer) + harness.Median(s.Broker) + harness.Median(s.Redis)
}

// brokerSpan returns the broker's CPU time used while run ran; 0, and a
// warning, when it cannot be read (another stack, a broker restarted), so
// the figures leave the broker out.
func (b *bench) brokerSpan(ctx context.Context, run func() error) (time.Duration, error) {
	m, merr := b.brokerMeter()
	var before, after time.Duration
	if merr == nil {
		before, merr = m.read(ctx)
	}
	err := run()
	if merr == nil {
		after, merr = m.read(ctx)
	}
	if merr != nil || after < before {
		b.log.Warn("bench: no Kafka broker CPU in the steady-state figures", "err", merr)
		return 0, err
	}
	return after - before, err
}

// fetchOnlyCPU is fetchOnly with the CPU this process and the broker spent
// on it.
func (b *bench) fetchOnlyCPU(ctx context.Context, topic string, decode bool, into *SteadyCPU) (float64, error) {
	self0, err := harness.ProcCPU(os.Getpid())
	if err != nil {
		return 0, err
	}
	var rate float64
	broker, err := b.brokerSpan(ctx, func() (err error) {
		rate, err = b.fetchOnly(ctx, topic, decode)
		return err
	})
	if err != nil {
		return 0, err
	}
	self1, err := harness.ProcCPU(os.Getpid())
	if err != nil {
		return 0, fmt.Errorf("cpu of the fetch-only run: %w", err)
	}
	into.add(perEvent(self1-self0, b.cfg.SteadyEvents), perEvent(broker, b.cfg.SteadyEvents), 0)
	return rate, nil
}
