// Package pacedload publishes synthetic events at a steady rate and tallies,
// per subject, what Kafka acknowledged: the count a fault test or a fault
// suite compares with what the aggregator counted (every acknowledged event
// must be counted once; events of failed publishes are in doubt, as Kafka
// may hold them).
//
//	done := make(chan *pacedload.Tally, 1)
//	go func() { done <- pacedload.Run(ctx, pub, pacedload.Config{Rate: 500, Action: "crash", Kind: "k", SubjectPrefix: "u"}) }()
//	... // faults
//	cancel()
//	tally := <-done
package pacedload

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/event"
)

// Publisher sends events and returns once Kafka acknowledged them all, or
// with an error (*producer.Publisher is one).
type Publisher interface {
	Publish(ctx context.Context, evs ...event.Event) error
}

// Config describes paced synthetic load.
type Config struct {
	// Rate is events per second over all workers. Required.
	Rate float64
	// Action and Kind of every event. Required.
	Action, Kind string
	// SubjectPrefix + index names the subjects, e.g. "kill-17".
	SubjectPrefix string
	// Subjects is how many distinct subjects (uniform). Default 100.
	Subjects int
	// Workers publish concurrently, each with synchronous Publish calls, so
	// an event is tallied only once Kafka acknowledged it. Default 4.
	Workers int
	// Batch is the most events of one Publish call. Default 100.
	Batch int
	// TotalOnly tallies the total alone, not per subject: a load whose
	// subjects nobody checks spares the generator a map write per event.
	TotalOnly bool
}

// Tally counts what a Run got acknowledged.
type Tally struct {
	mu        sync.Mutex
	Acked     map[string]int64 // per subject
	AckedN    int64
	Failed    int64 // events of Publish calls that returned an error: in doubt
	FirstErr  error
	LastErrAt time.Time
}

// Snapshot returns acked and failed totals.
func (t *Tally) Snapshot() (acked, failed int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.AckedN, t.Failed
}

// Run publishes paced events until ctx ends and returns the tally.
func Run(ctx context.Context, pub Publisher, cfg Config) *Tally {
	if cfg.Subjects == 0 {
		cfg.Subjects = 100
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if cfg.Batch == 0 {
		cfg.Batch = 100
	}
	t := &Tally{Acked: map[string]int64{}}
	var wg sync.WaitGroup
	per := cfg.Rate / float64(cfg.Workers)
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
			start := time.Now()
			var sent int64
			evs := make([]event.Event, 0, cfg.Batch)
			for ctx.Err() == nil {
				due := int64(per*time.Since(start).Seconds()) - sent
				if due <= 0 {
					select {
					case <-ctx.Done():
					case <-time.After(5 * time.Millisecond):
					}
					continue
				}
				n := min(due, int64(cfg.Batch))
				evs = evs[:0]
				now := time.Now()
				for i := int64(0); i < n; i++ {
					evs = append(evs, event.Event{
						V: event.Version, ID: event.NewID(), Action: cfg.Action, Kind: cfg.Kind,
						Subject: cfg.SubjectPrefix + strconv.Itoa(rng.IntN(cfg.Subjects)), TS: now, N: 1,
					})
				}
				// A Publish that outlives the load's context still gets its
				// answer, so the tally stays exact.
				pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
				err := pub.Publish(pctx, evs...)
				cancel()
				sent += n
				t.mu.Lock()
				if err != nil {
					t.Failed += n
					if t.FirstErr == nil {
						t.FirstErr = err
					}
					t.LastErrAt = time.Now()
				} else {
					t.AckedN += n
					if !cfg.TotalOnly {
						for _, e := range evs {
							t.Acked[e.Subject]++
						}
					}
				}
				t.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return t
}
