package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReplaceBlockKeepsOthersSections(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.md")
	if err := os.WriteFile(path, []byte("# Benchmarks\n\n## Limiter\n\ntheirs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"one", "two"} {
		if err := ReplaceBlock(path, "bench:summary", "Benchmarks", body); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(path)
	got := string(b)
	if strings.Contains(got, "one") || !strings.Contains(got, "two") || !strings.Contains(got, "## Limiter\n\ntheirs") {
		t.Fatalf("unexpected file:\n%s", got)
	}
	if strings.Index(got, "two") > strings.Index(got, "## Limiter") {
		t.Fatalf("summary not at the top:\n%s", got)
	}
}

func TestMedianQuantile(t *testing.T) {
	if m := Median([]float64{3, 1, 2}); m != 2 {
		t.Fatalf("median %v", m)
	}
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if q := Quantile(ds, 0.5); q != 5 {
		t.Fatalf("p50 %v", q)
	}
	if q := Quantile(ds, 0.99); q != 10 {
		t.Fatalf("p99 %v", q)
	}
}

func TestProcCPUOfThisProcess(t *testing.T) {
	before, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the kernel has charged at least one tick more.
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		after, err := ProcCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			break
		}
	}
	_ = x
	if _, err := ProcCPU(-1); err == nil {
		t.Fatal("pid -1: no error")
	}
}
