package feed

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the followers of one process, labelled by partition.
type Metrics struct {
	lag     *prometheus.GaugeVec
	entries *prometheus.CounterVec
	resyncs *prometheus.CounterVec
	gaps    *prometheus.CounterVec
	errors  *prometheus.CounterVec
}

// NewMetrics registers the followers' metrics under name (e.g.
// "floodgate_limiter_feed") with reg; nil reg registers nothing.
func NewMetrics(reg prometheus.Registerer, name string) (*Metrics, error) {
	m := &Metrics{
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: name + "_lag_seconds",
			Help: "Age of the last change entry read, by partition (0 once caught up): how far behind the aggregator's writes the follower is.",
		}, []string{"partition"}),
		entries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name + "_entries_total", Help: "Change entries applied, by partition.",
		}, []string{"partition"}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name + "_snapshots_total", Help: "Snapshots loaded (at start and after a gap), by partition.",
		}, []string{"partition"}),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name + "_gaps_total", Help: "Breaks in the change sequence (entries trimmed before they were read, or lost with a Redis primary), by partition.",
		}, []string{"partition"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name + "_errors_total", Help: "Failed reads and unreadable entries, by partition.",
		}, []string{"partition"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.lag, m.entries, m.resyncs, m.gaps, m.errors} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("feed metrics: %w", err)
			}
		}
	}
	return m, nil
}

type partitionMetrics struct {
	lag                            prometheus.Gauge
	entries, resyncs, gaps, errors prometheus.Counter
}

// partition returns the series of one partition; a nil *Metrics gives
// series registered nowhere.
func (m *Metrics) partition(p int) partitionMetrics {
	if m == nil {
		m, _ = NewMetrics(nil, "unregistered")
	}
	l := strconv.Itoa(p)
	return partitionMetrics{
		lag: m.lag.WithLabelValues(l), entries: m.entries.WithLabelValues(l),
		resyncs: m.resyncs.WithLabelValues(l), gaps: m.gaps.WithLabelValues(l), errors: m.errors.WithLabelValues(l),
	}
}
