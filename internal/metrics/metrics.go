// Package metrics builds the Prometheus registry every long-running
// floodgate process serves on /metrics: the Go runtime and process
// collectors, floodgate_build_info, and the off-heap memory that
// go_memstats_* does not show. Each component registers its own metrics on
// it; nothing goes to the global registry.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/floodgate-dev/floodgate/internal/offheap"
	"github.com/floodgate-dev/floodgate/internal/version"
)

// NewRegistry returns a process's registry with the collectors every
// floodgate process exports.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), version.Collector())
	// What a write-back owner keeps per subject is outside the Go heap
	// (package offheap), so go_memstats_* does not show it.
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "floodgate_offheap_bytes",
		Help: "Memory mapped outside the Go heap for per-subject tables (a write-back aggregator's rooms, bucket copies and pending increments); RSS counts the pages touched.",
	}, func() float64 { return float64(offheap.Mapped()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "floodgate_offheap_fallbacks_total",
		Help: "Per-subject table chunks allocated on the Go heap because the kernel refused a mapping (vm.max_map_count, address space).",
	}, func() float64 { return float64(offheap.Fallbacks()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "floodgate_offheap_unmap_errors_total",
		Help: "Per-subject table chunks the kernel refused to unmap (a bug): their memory stays mapped, leaked.",
	}, func() float64 { return float64(offheap.UnmapErrors()) }))
	return reg
}
