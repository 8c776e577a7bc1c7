package retention

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	runs        *prometheus.CounterVec
	moved       *prometheus.CounterVec
	written     *prometheus.CounterVec
	dropped     *prometheus.CounterVec
	expired     *prometheus.CounterVec
	forgotten   *prometheus.CounterVec
	lastSuccess prometheus.Gauge
	duration    prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_roller_runs_total", Help: "Roller runs by result: ok, busy (another roller held the lock), error.",
		}, []string{"result"}),
		moved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_roller_rows_moved_total", Help: "Bucket rows moved out of a tier into the next.",
		}, []string{"from", "to"}),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_roller_rows_written_total", Help: "Bucket rows inserted or updated in the coarser tier.",
		}, []string{"from", "to"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_roller_partitions_dropped_total", Help: "Partitions dropped per tier.",
		}, []string{"step"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_roller_expired_events_total", Help: "Events removed by the last tier's finite horizon (still in totals).",
		}, []string{"step"}),
		forgotten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_roller_forgotten_rows_total", Help: "Rows of a personal kind deleted past its history horizon, per kind and table.",
		}, []string{"kind", "table"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_roller_last_success_timestamp_seconds", Help: "Unix time of the last successful roller run.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "floodgate_roller_run_seconds", Help: "Duration of successful roller runs.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.runs, m.moved, m.written, m.dropped, m.expired, m.forgotten, m.lastSuccess, m.duration} {
		err := reg.Register(c)
		var are prometheus.AlreadyRegisteredError
		if err != nil && !errors.As(err, &are) {
			return nil, fmt.Errorf("roller metrics: %w", err)
		}
	}
	return m, nil
}
