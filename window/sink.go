package window

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"floodgate/aggregator"
	"floodgate/rules"
)

// MessageWriter publishes decisions; *kafka.Writer satisfies it.
type MessageWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

var _ MessageWriter = (*kafka.Writer)(nil)

// SinkConfig configures a Sink.
type SinkConfig struct {
	// Store holds the counters. Required.
	Store *Store
	// Group is the consumer group whose offsets the sink keeps (the offset
	// key names it). Required.
	Group string
	// Rules returns the rules in force; called once per batch. Required
	// (reload.Watcher.Current).
	Rules func() *rules.Set
	// Decisions receives each new deny and shadow decision as JSON (see
	// Decision.MarshalJSON), keyed "kind:subject". Nil: not published.
	Decisions MessageWriter
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
	case c.Store == nil:
		return errors.New("window sink: nil store")
	case c.Group == "":
		return errors.New("window sink: no consumer group")
	case c.Rules == nil:
		return errors.New("window sink: no rules source")
	}
	return nil
}

// Sink is the live path's aggregator.Sink: batches become bucket counters,
// partition offsets and deny records in Redis in one script run, then the
// new decisions are published.
type Sink struct {
	cfg     SinkConfig
	log     *slog.Logger
	events  *prometheus.CounterVec
	denies  *prometheus.CounterVec
	batches *prometheus.CounterVec
	pubErrs prometheus.Counter
}

var _ aggregator.Sink = (*Sink)(nil)

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
	labels := prometheus.Labels{"group": cfg.Group}
	s := &Sink{
		cfg: cfg,
		log: cfg.Logger.With("group", cfg.Group),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_events_total", ConstLabels: labels,
			Help: "Events of applied batches by result: applied (counted), old (older than every window of their rules), counted_by_limiter (strict mode counted them), no_rule.",
		}, []string{"result"}),
		denies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_decisions_total", ConstLabels: labels,
			Help: "New decisions by rule; shadow=true for shadow rules (recorded, never denied).",
		}, []string{"rule", "shadow"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_batches_total", ConstLabels: labels,
			Help: "Batches by result: applied, duplicate (already held, redelivered), trimmed (partly held).",
		}, []string{"result"}),
		pubErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_live_decision_publish_errors_total", ConstLabels: labels,
			Help: "Failed writes of decisions to the decisions topic (the deny records are in Redis regardless).",
		}),
	}
	// Export every series from the start, so rates work from the first scrape.
	for _, r := range []string{"applied", "old", "counted_by_limiter", "no_rule"} {
		s.events.WithLabelValues(r)
	}
	for _, r := range []string{"applied", "duplicate", "trimmed"} {
		s.batches.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.events, s.denies, s.batches, s.pubErrs} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("window sink: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Resume implements aggregator.Sink.
func (s *Sink) Resume(ctx context.Context, topic string, partition int) (int64, bool, error) {
	return s.cfg.Store.Resume(ctx, s.cfg.Group, topic, partition)
}

// Apply implements aggregator.Sink. Publishing decisions is best effort: a
// failure is logged and counted but does not fail the batch, whose effect
// (counters, offsets, deny records) is already durable in Redis.
//
// When a batch applied in several script runs fails partway, the decisions
// of the runs that succeeded are published (and their events counted in
// the metrics) before the error is returned: the retry finds those runs
// applied and would never report them again.
func (s *Sink) Apply(ctx context.Context, b aggregator.Batch) error {
	res, err := s.cfg.Store.Apply(ctx, s.cfg.Group, b, s.cfg.Rules(), s.cfg.Now())
	if err != nil {
		s.countEvents(res)
		if perr := s.publish(ctx, res.Decisions); perr != nil {
			return errors.Join(err, perr)
		}
		return err
	}
	if res.Duplicate {
		s.batches.WithLabelValues("duplicate").Inc()
		s.log.Debug("batch already applied", "partition", b.Partition, "first", b.First, "last", b.Last)
		return nil
	}
	if res.Trimmed > 0 {
		s.batches.WithLabelValues("trimmed").Inc()
		s.log.Info("batch partly applied already; applied its tail", "partition", b.Partition, "first", b.First, "last", b.Last, "trimmed", res.Trimmed)
	} else {
		s.batches.WithLabelValues("applied").Inc()
	}
	if res.Gap > 0 {
		s.log.Warn("offset gap: the batch starts after the stored offset", "partition", b.Partition, "first", b.First, "gap", res.Gap)
	}
	s.countEvents(res)
	return s.publish(ctx, res.Decisions)
}

func (s *Sink) countEvents(res ApplyResult) {
	s.events.WithLabelValues("applied").Add(float64(res.Applied))
	s.events.WithLabelValues("old").Add(float64(res.Old))
	s.events.WithLabelValues("counted_by_limiter").Add(float64(res.CountedByLimiter))
	s.events.WithLabelValues("no_rule").Add(float64(res.NoRule))
}

// publish logs, counts and publishes new decisions (best effort: a failed
// write is logged and counted, not returned).
func (s *Sink) publish(ctx context.Context, decisions []Decision) error {
	if len(decisions) == 0 {
		return nil
	}
	msgs := make([]kafka.Message, 0, len(decisions))
	for _, d := range decisions {
		s.denies.WithLabelValues(d.Rule, fmt.Sprint(d.Shadow)).Inc()
		s.log.Info("deny", "action", d.Action, "kind", d.Kind, "subject", d.Subject, "rule", d.Rule,
			"limit", d.Limit.String(), "count", d.Count, "until", d.Until, "shadow", d.Shadow)
		v, err := json.Marshal(d)
		if err != nil {
			return fmt.Errorf("encode decision: %w", err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(d.Kind + ":" + d.Subject), Value: v, Time: d.TS})
	}
	if s.cfg.Decisions != nil {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := s.cfg.Decisions.WriteMessages(pctx, msgs...); err != nil {
			s.pubErrs.Inc()
			s.log.Error("publish decisions", "count", len(msgs), "err", err)
		}
	}
	return nil
}
