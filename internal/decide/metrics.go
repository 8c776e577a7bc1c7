package decide

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the limiter, registered by New when Config.Registerer is set.
type metrics struct {
	checks        *prometheus.CounterVec
	denies        *prometheus.CounterVec
	shadowDenies  *prometheus.CounterVec
	invalid       *prometheus.CounterVec
	memory        prometheus.Counter
	overflowReads prometheus.Counter
	descLimits    *prometheus.CounterVec
	subjects      prometheus.Counter
	state         []prometheus.Collector // of the State, when there is one
	redis         *prometheus.HistogramVec
	failures      *prometheus.CounterVec
	publishErrors *prometheus.CounterVec
	counted       prometheus.Counter
	queued        prometheus.Counter
	requests      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	rules         *ruleDecisions
}

func newMetrics() *metrics {
	return &metrics{
		rules: newRuleDecisions(),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_limiter_checks_total",
			Help: "Decisions by operation (check, take) and result (allowed, denied, degraded_allowed, degraded_denied).",
		}, []string{"op", "result"}),
		denies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_limiter_denies_total",
			Help: "Denied decisions by the rule that denied (empty in closed failure mode).",
		}, []string{"rule"}),
		shadowDenies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_limiter_shadow_denies_total",
			Help: "Would-be denials of shadow rules, by rule.",
		}, []string{"rule"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_limiter_invalid_requests_total",
			Help: "Requests refused as malformed, by operation.",
		}, []string{"op"}),
		memory: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_limiter_memory_checks_total",
			Help: "Checks answered from the in-memory decision state, without Redis.",
		}),
		descLimits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_limiter_descriptor_limits_total",
			Help: "RLS descriptors that carried a limit, by outcome: honoured, or ignored and why (check, not_strict, no_window, unit, taker).",
		}, []string{"outcome"}),
		overflowReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_limiter_state_overflow_reads_total",
			Help: "Checks read from Redis because the in-memory state was past its cap and did not hold a subject.",
		}),
		subjects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_limiter_subjects_total",
			Help: "Subjects decided by checks and takes (each looked up in memory or Redis): at most the bound on subjects per request (16), whatever a request names.",
		}),
		redis: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "floodgate_limiter_redis_seconds",
			Help:    "Latency of the limiter's Redis round trips by operation (check, take), failures included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
		}, []string{"op"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_limiter_failure_mode_total",
			Help: "Answers given while Redis failed, by mode (memory: a ban or denial held in memory denied; open, closed: the failure mode) and reason (timeout, error).",
		}, []string{"mode", "reason"}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_limiter_publish_errors_total",
			Help: "Take events the publisher refused, by kind (counted: already in Redis; uncounted).",
		}, []string{"kind"}),
		counted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_limiter_strict_counted_total",
			Help: "Events counted in Redis by strict-mode takes.",
		}),
		queued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_limiter_strict_queued_total",
			Help: "Strict takes' events handed to their slot's take stream with the count, for the partition owner to publish (the rest the limiter publishes itself: a full stream).",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_limiter_requests_total",
			Help: "Requests by surface (connect, http, rls) and outcome (ok, over_limit, invalid, unauthenticated, error).",
		}, []string{"surface", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "floodgate_limiter_request_seconds",
			Help: "Time to answer a request, by surface (connect, http, rls): from the handler's start to its answer, whatever the outcome.",
			// 50 µs (an allowed check from memory) to about 1 s.
			Buckets: prometheus.ExponentialBuckets(0.00005, 2.5, 12),
		}, []string{"surface"}),
	}
}

// observe records a request's latency on surface; deferred at a
// handler's start: defer m.observe("rls", time.Now()).
func (m *metrics) observe(surface string, start time.Time) {
	m.latency.WithLabelValues(surface).Observe(time.Since(start).Seconds())
}

// zero creates the series of fixed labels at zero: an alert's increase()
// sees the first degraded answer (a series born at 1 shows no increase),
// and dashboards show 0, not "no data".
func (m *metrics) zero() {
	for _, mode := range []string{"memory", "open", "closed"} {
		for _, reason := range []string{"timeout", "error"} {
			m.failures.WithLabelValues(mode, reason)
		}
	}
	for _, op := range []string{"check", "take"} {
		m.redis.WithLabelValues(op)
		m.invalid.WithLabelValues(op)
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	m.zero()
	cs := []prometheus.Collector{m.checks, m.denies, m.shadowDenies, m.invalid, m.memory, m.overflowReads, m.descLimits, m.subjects,
		m.redis, m.failures, m.publishErrors, m.counted, m.queued, m.requests, m.latency, m.rules.vec}
	cs = append(cs, m.state...)
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
