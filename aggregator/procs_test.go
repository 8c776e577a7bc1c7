package aggregator

import (
	"log/slog"
	"os"
	"runtime"
	"testing"
)

// The aggregator takes one P more than the CPUs unless told otherwise:
// by --procs, by GOMAXPROCS, or by a quota that lowered the default.
func TestSetProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	log := slog.New(slog.DiscardHandler)
	for _, bad := range []int{-1, 1 << 30} {
		if err := setProcs(bad, log); err == nil {
			t.Fatalf("--procs %d accepted", bad)
		}
	}
	if err := setProcs(3, log); err != nil || runtime.GOMAXPROCS(0) != 3 {
		t.Fatalf("--procs 3: %v, GOMAXPROCS %d", err, runtime.GOMAXPROCS(0))
	}
	runtime.GOMAXPROCS(runtime.NumCPU())
	t.Setenv("GOMAXPROCS", "")
	if err := setProcs(0, log); err != nil || runtime.GOMAXPROCS(0) != runtime.NumCPU()+1 {
		t.Fatalf("default: %v, GOMAXPROCS %d, want %d", err, runtime.GOMAXPROCS(0), runtime.NumCPU()+1)
	}
	t.Setenv("GOMAXPROCS", "2")
	runtime.GOMAXPROCS(2)
	if err := setProcs(0, log); err != nil || runtime.GOMAXPROCS(0) != 2 {
		t.Fatalf("GOMAXPROCS=2 set: %v, GOMAXPROCS %d, want it kept", err, runtime.GOMAXPROCS(0))
	}
	if runtime.NumCPU() > 1 {
		os.Unsetenv("GOMAXPROCS")
		runtime.GOMAXPROCS(runtime.NumCPU() - 1) // as a quota leaves it
		if err := setProcs(0, log); err != nil || runtime.GOMAXPROCS(0) != runtime.NumCPU()-1 {
			t.Fatalf("under a quota: %v, GOMAXPROCS %d, want %d kept", err, runtime.GOMAXPROCS(0), runtime.NumCPU()-1)
		}
	}
}
