package aggregator

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
)

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
