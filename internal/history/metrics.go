package history

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type sinkMetrics struct {
	batches *prometheus.CounterVec
	rows    prometheus.Counter
	events  *prometheus.CounterVec
	visits  prometheus.Counter
	late    prometheus.Counter
	errors  prometheus.Counter
	offset  *prometheus.GaugeVec
	seconds prometheus.Histogram
	prunes  *prometheus.CounterVec
	pruned  prometheus.Counter
	// unpartitioned: days of backdated minutes given no 1m partition.
	unpartitioned prometheus.Counter
}

func newSinkMetrics(reg prometheus.Registerer, group string) (*sinkMetrics, error) {
	labels := prometheus.Labels{"group": group}
	m := &sinkMetrics{
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_history_batches_total", ConstLabels: labels,
			Help: "History batches by result: applied, duplicate (already stored, no-op), trimmed (head already stored: the tail is then applied), conflict (offset gap, not written).",
		}, []string{"result"}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_history_bucket_rows_written_total", ConstLabels: labels,
			Help: "Bucket rows inserted or updated by the history sink.",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_history_events_total", ConstLabels: labels,
			Help: "Events (sum of n) of applied batches by result: applied (counted), duplicate (an id counted already within the dedup horizon, not counted), not_stored (a kind history stores no rows of: history: drop).",
		}, []string{"result"}),
		visits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_history_visits_total", ConstLabels: labels,
			Help: "Events that carried the attr counted as their action's visitor (SinkConfig.Visitors), added to the sketches.",
		}),
		late: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_history_late_events_total", ConstLabels: labels,
			Help: "Events older than every tier's horizon: in totals and history_late, in no bucket.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_history_apply_errors_total", ConstLabels: labels,
			Help: "Failed history writes (retried by the aggregator).",
		}),
		offset: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_history_next_offset", ConstLabels: labels,
			Help: "Next offset stored by the history sink, per topic and partition.",
		}, []string{"topic", "partition"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "floodgate_history_apply_seconds", ConstLabels: labels,
			Help:    "Duration of one history batch write.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		unpartitioned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_history_days_unpartitioned_total", ConstLabels: labels,
			Help: "Days of minutes below the 1m tier's watermark or horizon given no 1m partition (their rows go to a coarser tier, history_late or the DEFAULT partition until the next roll).",
		}),
		prunes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_history_dedup_prunes_total", ConstLabels: labels,
			Help: "Background prunes of the event ids past the dedup horizon, by result: ok, error (retried at the next one).",
		}, []string{"result"}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_history_dedup_ids_pruned_total", ConstLabels: labels,
			Help: "Event ids deleted from history_ids past the dedup horizon.",
		}),
	}
	for _, r := range []string{"applied", "duplicate", "not_stored"} {
		m.events.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.prunes.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.batches, m.rows, m.events, m.visits, m.late, m.errors, m.offset, m.seconds, m.prunes, m.pruned, m.unpartitioned} {
		if err := register(reg, c); err != nil {
			return nil, fmt.Errorf("history sink metrics: %w", err)
		}
	}
	return m, nil
}

// register is prometheus Register that tolerates a collector registered
// before (a second sink of the same group in one process).
func register(reg prometheus.Registerer, c prometheus.Collector) error {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		return nil
	}
	return err
}
