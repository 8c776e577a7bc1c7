package consume

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the runner's own; sinks register theirs. Every series carries
// the group, so the live and history groups of one process stay apart.
type metrics struct {
	in           prometheus.Counter
	applied      prometheus.Counter
	deadLettered prometheus.Counter
	invalid      *prometheus.CounterVec
	control      prometheus.Counter
	cuts         prometheus.Counter
	errors       *prometheus.CounterVec
	generations  prometheus.Counter
	batchSize    prometheus.Histogram
	applySeconds prometheus.Histogram
	lag          *prometheus.GaugeVec
	readAhead    *prometheus.GaugeVec
	aheadWaits   *prometheus.CounterVec
	skipped      *prometheus.CounterVec
	resets       *prometheus.CounterVec
	rewinds      *prometheus.CounterVec
	rebuilds     *prometheus.CounterVec
	stopped      *prometheus.GaugeVec
	unreadable   *prometheus.CounterVec
	dlqDropped   *prometheus.CounterVec
	clamped      prometheus.Counter
	// sinkOffsetMissing: partitions assigned with a group commit but no
	// offset in the sink.
	sinkOffsetMissing *prometheus.CounterVec
	// recounts: partitions a Recounter counts again from the log, and the
	// offsets each recount reads again.
	recounts, recounted *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, group string) (*metrics, error) {
	labels := prometheus.Labels{"group": group}
	m := &metrics{
		in: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_aggregator_messages_in_total", Help: "Kafka messages read.", ConstLabels: labels}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_aggregator_events_applied_total", Help: "Valid events handed to the sink and applied.", ConstLabels: labels}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_aggregator_dead_lettered_total", Help: "Malformed messages written to the dead-letter topic.", ConstLabels: labels}),
		control: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_aggregator_transaction_markers_total", Help: "Transaction commit/abort markers read past (they hold no event).", ConstLabels: labels}),
		cuts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_aggregator_fetch_cuts_total", Help: "Fetches stopped before the end of their response because their records held --read-ahead-bytes decompressed (the rest is fetched again; nothing skipped).", ConstLabels: labels}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_aggregator_invalid_total", Help: "Malformed messages by reason.", ConstLabels: labels}, []string{"reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_aggregator_errors_total", Help: "Failed attempts (retried) by operation.", ConstLabels: labels}, []string{"op"}),
		generations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_aggregator_generations_total", Help: "Consumer group generations joined (rebalances).", ConstLabels: labels}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "floodgate_aggregator_batch_messages", Help: "Messages per batch.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(1, 4, 9)}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "floodgate_aggregator_apply_seconds", Help: "Latency of one sink Apply.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_aggregator_lag_messages", Help: "High-water mark minus the next offset, per partition.", ConstLabels: labels}, []string{"partition"}),
		readAhead: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_aggregator_read_ahead_bytes", Help: "Records fetched and not yet taken into a batch, per partition (bounded by --read-ahead-bytes).", ConstLabels: labels}, []string{"partition"}),
		aheadWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_aggregator_read_ahead_waits_total", Help: "Fetched responses that waited for room under --read-ahead-bytes before they were handed over, per partition (the sink is the slower side).", ConstLabels: labels}, []string{"partition"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_aggregator_skipped_offsets_total", Help: "Offsets deleted by retention before this group read them (their events are not counted), per partition.", ConstLabels: labels}, []string{"partition"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_aggregator_offset_resets_total", Help: "Stored offsets beyond the log's end (topic recreated) moved back to the log's start, per partition.", ConstLabels: labels}, []string{"partition"}),
		rebuilds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_aggregator_memory_rebuilds_total", Help: "Partitions read again from a write-back sink's checkpoint to rebuild its memory (another writer fenced it, an operator acted): nothing lost, per partition.", ConstLabels: labels}, []string{"partition"}),
		recounts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_aggregator_recounts_total", Help: "Partitions counted again from the log because the sink's store lost them (a Redis restart without persistence, a failover before anything was replicated), per partition.", ConstLabels: labels}, []string{"partition"}),
		recounted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_aggregator_recounted_offsets_total", Help: "Offsets read again by recounts: from the recount's start to where the partition stood when its store lost it, per partition.", ConstLabels: labels}, []string{"partition"}),
		rewinds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_aggregator_rewinds_total", Help: "Partitions read again from the sink's offset because the sink lost batches it had acknowledged (a Redis failover), per partition.", ConstLabels: labels}, []string{"partition"}),
		stopped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_aggregator_partition_stopped", Help: "1 while a partition is stopped on lost offsets (--on-lost-offsets=stop) until an operator acts.", ConstLabels: labels}, []string{"partition"}),
		unreadable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_aggregator_unreadable_offsets_total", Help: "Offsets skipped unread because their record batch decompresses past the bound or a record holds too many headers (their events are not counted), per partition.", ConstLabels: labels}, []string{"partition"}),
		dlqDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_aggregator_dead_letter_dropped_total", Help: "Dead letters the DLQ refused for good (why=permanent) or kept failing (why=retries_exhausted), dropped so the partition goes on, per partition.", ConstLabels: labels}, []string{"partition", "why"}),
		clamped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_aggregator_clamped_total", Help: "Events ahead of the aggregator clock by less than the max future skew, counted at the clock's time.", ConstLabels: labels}),
		sinkOffsetMissing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_aggregator_sink_offset_missing_total", Help: "Partitions assigned with progress committed by the group but no offset in the sink: the sink's store lost its data, per partition.", ConstLabels: labels}, []string{"partition"}),
	}
	for _, op := range []string{"fetch", "apply", "dead-letter", "reset-offset"} {
		m.errors.WithLabelValues(op)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.in, m.applied, m.deadLettered, m.invalid, m.control, m.cuts, m.errors, m.generations, m.batchSize, m.applySeconds, m.lag, m.readAhead, m.aheadWaits, m.skipped, m.resets, m.rewinds, m.rebuilds, m.stopped, m.unreadable, m.dlqDropped, m.clamped, m.sinkOffsetMissing, m.recounts, m.recounted} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("register aggregator metrics group=%s: %w", group, err)
			}
			return nil, fmt.Errorf("register aggregator metrics: %w", err)
		}
	}
	return m, nil
}

// partitionStarted creates a partition's series at zero: an alert's
// increase() then sees its first skipped or unreadable offset (a series
// born at 1 shows no increase), and dashboards show 0, not "no data".
func (m *metrics) partitionStarted(partition int) {
	p := strconv.Itoa(partition)
	m.skipped.WithLabelValues(p)
	m.unreadable.WithLabelValues(p)
	m.stopped.WithLabelValues(p)
	m.resets.WithLabelValues(p)
	m.rewinds.WithLabelValues(p)
	m.rebuilds.WithLabelValues(p)
	m.sinkOffsetMissing.WithLabelValues(p)
	m.recounts.WithLabelValues(p)
	m.recounted.WithLabelValues(p)
	for _, why := range []string{"permanent", "retries_exhausted"} {
		m.dlqDropped.WithLabelValues(p, why)
	}
}
