// Package harness holds what the benchmark and fault suites share: starting
// floodgate processes and sampling their peak RSS, scraping Prometheus
// metrics, reading Kafka end offsets and sink offsets, Redis INFO deltas,
// running Kafka's own Java tools, and describing the machine.
//
// It exists for scripts/bench and scripts/chaos; nothing in floodgate's
// runtime depends on it.
//
//	p, err := harness.Start(ctx, harness.ProcConfig{Name: "aggregator", Bin: bin, Args: args, LogDir: dir})
//	...
//	peak := p.PeakRSS() // VmHWM, sampled until the process exits
//	err = p.Stop(10 * time.Second)
package harness
