package main

import (
	"errors"
	"floodgate/offheap"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"floodgate/rules"
	"floodgate/rules/reload"
)

// defaultRules is the default of every --rules flag (each repeats it in its
// tag): relative to the repository, so that make demo, scripts/ and bench/
// find it in a checkout; images and manifests set FLOODGATE_RULES.
const defaultRules = "examples/rules.yaml"

// rulesFound says why a missing rules file is missing when it is the
// default: run outside the repository, "open examples/rules.yaml" alone
// does not tell what to do.
func rulesFound(path string) error {
	if path != defaultRules {
		return nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rules file %s not found (the default is relative to the repository; pass --rules or FLOODGATE_RULES)", path)
	}
	return nil
}

// loadRules loads the rules file once (commands that do not reload it).
func loadRules(path string) (*rules.Set, error) {
	if err := rulesFound(path); err != nil {
		return nil, err
	}
	return rules.Load(path)
}

// newRegistry is a long-running process's metrics registry, with the Go
// runtime and process collectors and floodgate_build_info every one of
// them exports.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBuildInfo(reg)
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

// watchRules loads the rules file and keeps reloading it on change and on
// SIGHUP; a bad file at start is an error, a bad file later keeps the last
// good rules.
func watchRules(path string, logger *slog.Logger, reg prometheus.Registerer) (*reload.Watcher, error) {
	if err := rulesFound(path); err != nil {
		return nil, err
	}
	w, err := reload.NewWatcher(reload.WatcherConfig{Path: path, SIGHUP: true, Logger: logger, Registerer: reg})
	if err != nil {
		return nil, err
	}
	logger.Info("rules loaded", "path", path, "rules", len(w.Current().Rules()))
	return w, nil
}

// setProcs sets GOMAXPROCS to procs; for 0, to one more than the CPUs,
// unless the GOMAXPROCS environment variable or a CPU quota (the
// runtime's default is below the CPU count then) chose it. The runtime
// polls the network from an idle P, or from its monitor thread every few
// milliseconds when none is idle: with every P busy (decoding fetched
// records, applying other partitions' batches, or on a machine whose
// cores other processes share), a batch whose Redis reply has arrived
// waits for that poll, and a batch makes one to four round trips. One P
// more leaves one idle more often; over a quota it would be throttled
// instead (docs/operations.md, "CPU").
func setProcs(procs int, logger *slog.Logger) error {
	switch {
	case procs < 0 || procs > maxProcs:
		// the runtime sets any number, and allocates every P
		return fmt.Errorf("--procs %d: want 0 (the default) to %d", procs, maxProcs)
	case procs > 0:
		runtime.GOMAXPROCS(procs)
	case os.Getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0) < runtime.NumCPU():
		return nil
	default:
		runtime.GOMAXPROCS(runtime.NumCPU() + 1)
	}
	logger.Debug("go procs", "gomaxprocs", runtime.GOMAXPROCS(0), "cpus", runtime.NumCPU())
	return nil
}

// maxProcs bounds --procs.
const maxProcs = 1024
