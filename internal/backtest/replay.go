package backtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// group names the replay's offsets in its private keys.
const group = "backtest"

// ruleSet is one rules set of a replay and its store.
type ruleSet struct {
	name  string
	rules *rules.Set
	store *live.Applier
}

// partition replays one partition's stream into every rules set's store,
// in ticks: the consecutive events of one second of the replay's clock are
// one Apply, evaluated at that clock (the live aggregator applies what it
// fetched and evaluates at its clock; when it keeps up, that is the
// events' second). Not safe for concurrent use.
type partition struct {
	id    int
	topic string
	rdb   *redis.Client
	sets  []*setState
	onDec func(set string, d window.DecisionMessage)
	// maxPending: bucket fields counted in memory before a checkpoint
	maxPending int
	from       int64 // ms: decisions before are the warm-up's
	to         int64 // ms: the range's end: nothing from there on is reported

	clock int64 // ms: the replay's clock, never going back
	next  int64 // the offset after the last tick applied; -1 before
	batch consume.Batch
	stats *partStats
}

// setState is what a partition keeps per rules set.
type setState struct {
	ruleSet
	room    *live.Headroom
	exp     *expirer
	sweep   int64 // second of the next deletion of expired buckets
	tallies *tallies
}

// partStats are read by the progress line while the partition runs.
type partStats struct {
	start, end int64        // offsets to read (Kafka)
	next       atomic.Int64 // next offset to read
	events     atomic.Int64 // accepted events
	clock      atomic.Int64 // ms
}

func newPartition(id int, topic string, be backend, cfg *Config, stats *partStats) *partition {
	p := &partition{id: id, topic: topic, rdb: be.rdb, onDec: cfg.OnDecision, maxPending: cfg.MaxPending, from: cfg.From.UnixMilli(), to: cfg.To.UnixMilli(), stats: stats,
		next: -1, batch: consume.Batch{Topic: topic, Partition: id}}
	for _, s := range be.stores {
		p.sets = append(p.sets, &setState{
			ruleSet: s,
			room:    live.NewHeadroom(200_000),
			exp:     newExpirer(s.store.Keys(), id, s.rules, time.Minute),
			tallies: newTallies(cfg.From, cfg.To),
		})
	}
	return p
}

// errEnd: the partition's clock reached the range's end; what follows
// cannot change the report.
var errEnd = errors.New("backtest: the range's end")

// add takes the next offset of the stream: its clock sample (ms) and its
// event, nil when the aggregator would not count it (refused). A new
// second of the clock applies the tick before; the range's end, errEnd.
func (p *partition) add(ctx context.Context, offset, clock int64, ev *event.Event) error {
	c := max(p.clock, clock)
	if floorDiv(c, 1000) != floorDiv(p.clock, 1000) && len(p.batch.Records) > 0 {
		if err := p.flush(ctx); err != nil {
			return err
		}
	}
	if c >= p.to {
		return errEnd
	}
	p.clock = c
	if ev != nil {
		p.batch.Records = append(p.batch.Records, consume.Record{Offset: offset, Event: *ev})
		p.stats.events.Add(1)
	}
	return nil
}

// flush applies the tick in hand to every set, the sets at once (each
// has its own keys).
func (p *partition) flush(ctx context.Context) error {
	if len(p.batch.Records) == 0 {
		return nil
	}
	b := p.batch
	// Batches are contiguous, as the aggregator's: a tick covers the
	// offsets since the last one (refused messages hold none counted), so
	// the store finds each starting where it stands.
	b.First, b.Last = b.Records[0].Offset, b.Records[len(b.Records)-1].Offset
	if p.next >= 0 {
		b.First = p.next
	}
	now := time.UnixMilli(p.clock)
	errs := make([]error, len(p.sets))
	var wg sync.WaitGroup
	for i, s := range p.sets[1:] {
		wg.Go(func() { errs[i+1] = p.apply(ctx, s, b, now) })
	}
	errs[0] = p.apply(ctx, p.sets[0], b, now)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	p.next = b.Last + 1
	p.batch.Records = p.batch.Records[:0]
	p.stats.clock.Store(p.clock)
	return nil
}

func (p *partition) apply(ctx context.Context, s *setState, b consume.Batch, now time.Time) error {
	res, err := s.store.Apply(ctx, group, b, s.rules, now, s.room)
	if err != nil {
		return fmt.Errorf("backtest %s: partition %d offsets %d-%d at %s: %w", s.name, p.id, b.First, b.Last, now.UTC().Format(time.RFC3339), err)
	}
	if s.room.Resident().Pending >= p.maxPending {
		// Counts wait in memory (write-back, as live) until they are many:
		// nothing but the replay reads this Redis, so a checkpoint only
		// bounds the memory.
		if _, err := s.store.Checkpoint(ctx, group, p.topic, p.id, s.room, now); err != nil {
			return fmt.Errorf("backtest %s: partition %d checkpoint at offset %d: %w", s.name, p.id, b.Last+1, err)
		}
	}
	for i := range res.Decisions {
		d := &res.Decisions[i]
		s.tallies.record(d, true)
		if p.onDec != nil && d.TS.UnixMilli() >= p.from && d.TS.UnixMilli() < s.tallies.to {
			p.onDec(s.name, *d)
		}
	}
	for i := range res.Extended {
		s.tallies.record(&res.Extended[i], false)
	}
	sec := floorDiv(now.UnixMilli(), 1000)
	s.exp.touch(b, sec)
	if sec < s.sweep {
		return nil
	}
	// At most once a simulated minute: deleting a bucket later than due
	// costs memory for a while, one more round trip a tick would cost time.
	s.sweep = sec + 60
	keys := s.exp.due(sec)
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		if err := p.rdb.Unlink(ctx, keys[:n]...).Err(); err != nil {
			return fmt.Errorf("backtest %s: partition %d: delete %d expired buckets: %w", s.name, p.id, n, err)
		}
		keys = keys[n:]
	}
	return nil
}

// finish applies the last tick and closes the tallies.
func (p *partition) finish(ctx context.Context) error {
	if err := p.flush(ctx); err != nil {
		return err
	}
	for _, s := range p.sets {
		s.tallies.finish()
	}
	return nil
}
