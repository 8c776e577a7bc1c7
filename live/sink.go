package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"floodgate/aggregator"
	"floodgate/rules"
)

// SinkConfig configures a Sink.
type SinkConfig struct {
	// Applier writes batches into the live store. Required.
	Applier *Applier
	// Group is the consumer group whose offsets the sink keeps (the offset
	// key names it). Required.
	Group string
	// Rules returns the rules in force; called once per batch. Required
	// (reload.Watcher.Current).
	Rules func() *rules.Set
	// Relay, when set, publishes each assigned partition's decisions to the
	// decisions topic from its change stream (RunPartition). Nil: nothing
	// is published (the change stream still records them).
	Relay *Relay
	// EvaluateAll evaluates every touched subject on every batch, as
	// floodgate did before headroom tracking (benchmarks compare the two).
	// Default false: a batch evaluates only subjects it can have brought to
	// half a limit or more.
	EvaluateAll bool
	// MaxHeadroom bounds the subjects whose headroom one partition
	// remembers. Default 200000.
	MaxHeadroom int
	// PruneEvery is how often the states that say nothing any more are
	// removed from each owned partition's state hash (Applier.Prune),
	// batches or not: an idle partition's hash shrinks too. Default 10s;
	// negative: never (the apply script still removes a few per batch).
	PruneEvery time.Duration
	// Now is the clock windows are evaluated at. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the sink's metrics. Nil: not registered.
	Registerer prometheus.Registerer
}

// Validate reports the first problem with c.
func (c *SinkConfig) Validate() error {
	switch {
	case c.Applier == nil:
		return errors.New("live sink: nil applier")
	case c.Group == "":
		return errors.New("live sink: no consumer group")
	case c.Rules == nil:
		return errors.New("live sink: no rules source")
	case c.MaxHeadroom < 0:
		return fmt.Errorf("live sink: max headroom %d is negative", c.MaxHeadroom)
	}
	return nil
}

// Sink is the live path's aggregator.Sink: each batch becomes bucket
// counters, the partition's offset, deny records, decision state and a
// change entry in Redis, in one script run in the partition's slot. New
// decisions leave through the change stream: the Relay publishes them,
// limiters follow it.
type Sink struct {
	cfg SinkConfig
	log *slog.Logger
	m   *sinkMetrics

	mu   sync.Mutex
	room map[int]*Headroom // per partition
	// had is the partitions this sink saw an offset of in Redis (Resume,
	// or a batch applied): one whose offset then goes missing lost its
	// data.
	had map[int]bool
}

var (
	_ aggregator.Sink            = (*Sink)(nil)
	_ aggregator.PartitionRunner = (*Sink)(nil)
)

// NewSink returns a Sink.
func NewSink(cfg SinkConfig) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxHeadroom == 0 {
		cfg.MaxHeadroom = 200_000
	}
	if cfg.PruneEvery == 0 {
		cfg.PruneEvery = 10 * time.Second
	}
	m, err := newSinkMetrics(cfg.Registerer, cfg.Group)
	if err != nil {
		return nil, err
	}
	return &Sink{cfg: cfg, log: cfg.Logger.With("group", cfg.Group), m: m, room: map[int]*Headroom{}, had: map[int]bool{}}, nil
}

// Resume implements aggregator.Sink.
func (s *Sink) Resume(ctx context.Context, topic string, partition int) (int64, bool, error) {
	next, ok, err := s.cfg.Applier.Store().Resume(ctx, s.cfg.Group, topic, partition)
	if ok {
		s.mu.Lock()
		s.had[partition] = true
		s.mu.Unlock()
	}
	return next, ok, err
}

// headroom returns the partition's Headroom, nil when every subject is to
// be evaluated.
func (s *Sink) headroom(partition int) *Headroom {
	if s.cfg.EvaluateAll {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.room[partition]
	if h == nil {
		h = NewHeadroom(s.cfg.MaxHeadroom)
		s.room[partition] = h
	}
	return h
}

// RunPartition implements aggregator.PartitionRunner: while this member
// owns the partition, its decisions are relayed to Kafka and its expired
// states pruned. What this member learnt of the partition's subjects is
// forgotten when it stops owning it: the next owner may change them.
func (s *Sink) RunPartition(ctx context.Context, topic string, partition int) {
	var wg sync.WaitGroup
	pctx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		wg.Wait()
		s.mu.Lock()
		delete(s.room, partition)
		s.mu.Unlock()
	}()
	if s.cfg.PruneEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.prune(pctx, partition)
		}()
	}
	if s.cfg.Relay != nil {
		s.cfg.Relay.Run(ctx, partition)
		return
	}
	<-ctx.Done()
}

// prune removes the partition's states that say nothing any more every
// PruneEvery until ctx ends. A failure is retried at the next tick: what
// is left costs memory only, never a wrong answer.
func (s *Sink) prune(ctx context.Context, partition int) {
	t := time.NewTicker(s.cfg.PruneEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.cfg.Applier.Prune(ctx, partition, s.cfg.Now())
		s.m.pruned.Add(float64(n))
		if err != nil && ctx.Err() == nil {
			s.log.Warn("prune of expired states failed; retrying at the next tick", "partition", partition, "err", err)
		}
	}
}

// Apply implements aggregator.Sink.
func (s *Sink) Apply(ctx context.Context, b aggregator.Batch) error {
	res, err := s.cfg.Applier.Apply(ctx, s.cfg.Group, b, s.cfg.Rules(), s.cfg.Now(), s.headroom(b.Partition))
	done := time.Now()
	// Runs of a split batch that succeeded before one failed are applied:
	// count them now, their retry will find them held.
	s.count(b, res, done)
	if err != nil {
		return err
	}
	s.mu.Lock()
	lost := res.OffsetMissing && s.had[b.Partition]
	s.had[b.Partition] = true
	s.mu.Unlock()
	if lost {
		// Redis lost the slot (a restart without persistence, a flush):
		// the counts and deny records before this batch are gone, and the
		// script took the batch for a partition's first.
		s.m.offsetMissing.WithLabelValues(strconv.Itoa(b.Partition)).Inc()
		s.log.Error("the partition's offset was missing from Redis although this sink had stored one: Redis lost its data; counts before this batch are gone (rebuild them with floodgate rebuild)",
			"topic", b.Topic, "partition", b.Partition, "first", b.First, "last", b.Last)
	}
	switch {
	case res.Duplicate:
		s.m.batches.WithLabelValues("duplicate").Inc()
		s.log.Debug("batch already applied", "partition", b.Partition, "first", b.First, "last", b.Last)
		return nil
	case res.Trimmed > 0:
		s.m.batches.WithLabelValues("trimmed").Inc()
		s.log.Info("batch partly applied already; applied its tail", "partition", b.Partition, "first", b.First, "last", b.Last, "trimmed", res.Trimmed)
	default:
		s.m.batches.WithLabelValues("applied").Inc()
	}
	return nil
}

func (s *Sink) count(b aggregator.Batch, res ApplyResult, done time.Time) {
	s.m.events.WithLabelValues("applied").Add(float64(res.Applied))
	s.m.events.WithLabelValues("old").Add(float64(res.Old))
	s.m.events.WithLabelValues("counted_by_limiter").Add(float64(res.CountedByLimiter))
	s.m.events.WithLabelValues("no_rule").Add(float64(res.NoRule))
	s.m.events.WithLabelValues("duplicate").Add(float64(res.Duplicates))
	s.m.subjects.WithLabelValues("evaluated").Add(float64(res.Evaluated))
	s.m.subjects.WithLabelValues("skipped").Add(float64(res.Subjects - res.Evaluated))
	s.m.fromCopies.Add(float64(res.Mirrored))
	if res.Misplaced > 0 {
		s.m.misplaced.WithLabelValues(strconv.Itoa(b.Partition)).Add(float64(res.Misplaced))
		s.log.Error("events on another partition than their key's: counted here, where strict takes for their subjects do not look (a producer with another partitioner, or partitions added)",
			"topic", b.Topic, "partition", b.Partition, "first", b.First, "last", b.Last, "subjects", res.Misplaced)
	}
	for _, d := range res.Decisions {
		s.m.decisions.WithLabelValues(d.Rule, strconv.FormatBool(d.Shadow)).Inc()
		if !d.Shadow {
			s.m.delay.Observe(max(0, done.Sub(d.Trigger).Seconds()))
		}
		s.log.Info("deny", "action", d.Action, "kind", d.Kind, "subject", d.Subject, "rule", d.Rule,
			"limit", d.Limit.String(), "count", d.Count, "until", d.Until, "shadow", d.Shadow)
	}
}

type sinkMetrics struct {
	events     *prometheus.CounterVec
	decisions  *prometheus.CounterVec
	batches    *prometheus.CounterVec
	subjects   *prometheus.CounterVec
	fromCopies prometheus.Counter
	misplaced  *prometheus.CounterVec
	pruned     prometheus.Counter
	delay      prometheus.Histogram
	// offsetMissing: batches that found their partition's offset gone
	// from Redis after this sink had stored one.
	offsetMissing *prometheus.CounterVec
}

func newSinkMetrics(reg prometheus.Registerer, group string) (*sinkMetrics, error) {
	labels := prometheus.Labels{"group": group}
	m := &sinkMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_events_total", ConstLabels: labels,
			Help: "Events of applied batches by result: applied (counted), old (older than every window of their rules), counted_by_limiter (strict mode counted them), no_rule, duplicate (an id counted already within the dedup horizon).",
		}, []string{"result"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_decisions_total", ConstLabels: labels,
			Help: "New decisions by rule; shadow=true for shadow rules (recorded, never denied).",
		}, []string{"rule", "shadow"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_batches_total", ConstLabels: labels,
			Help: "Batches by result: applied, duplicate (already held, redelivered), trimmed (partly held).",
		}, []string{"result"}),
		subjects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_subjects_total", ConstLabels: labels,
			Help: "Subjects of applied batches: evaluated against their limits, or skipped (too far from every limit for the batch to matter).",
		}, []string{"result"}),
		fromCopies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_live_evaluated_from_copies_total", ConstLabels: labels,
			Help: "Evaluated subjects whose windows the aggregator evaluated from its copies of their buckets (the rest: by the apply script in Redis).",
		}),
		misplaced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_misplaced_subjects_total", ConstLabels: labels,
			Help: "Subjects whose events sat on another partition than murmur2 of their key says (another partitioner, or partitions added): counted in the wrong slot.",
		}, []string{"partition"}),
		offsetMissing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_offset_missing_total", ConstLabels: labels,
			Help: "Batches that found their partition's offset gone from Redis after this sink had stored one: Redis lost its data (counts before them are gone).",
		}, []string{"partition"}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_live_pruned_states_total", ConstLabels: labels,
			Help: "Expired subject states removed from the owned partitions' state hashes by the prune timer.",
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "floodgate_live_decision_delay_seconds", ConstLabels: labels,
			Help:    "From the time of the event that took a subject over a limit to its deny record written in Redis.",
			Buckets: []float64{.002, .005, .01, .02, .03, .05, .075, .1, .2, .5, 1, 2, 5, 10},
		}),
	}
	// Export every series from the start, so rates work from the first scrape.
	for _, r := range []string{"applied", "old", "counted_by_limiter", "no_rule", "duplicate"} {
		m.events.WithLabelValues(r)
	}
	for _, r := range []string{"applied", "duplicate", "trimmed"} {
		m.batches.WithLabelValues(r)
	}
	for _, r := range []string{"evaluated", "skipped"} {
		m.subjects.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.events, m.decisions, m.batches, m.subjects, m.fromCopies, m.misplaced, m.pruned, m.delay, m.offsetMissing} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("live sink: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

var _ aggregator.OffsetResetter = (*Sink)(nil)

// ResetOffset implements aggregator.OffsetResetter.
func (s *Sink) ResetOffset(ctx context.Context, topic string, partition int, from, to int64) error {
	s.mu.Lock()
	delete(s.room, partition)
	s.mu.Unlock()
	return s.cfg.Applier.ResetOffset(ctx, s.cfg.Group, topic, partition, from, to)
}
