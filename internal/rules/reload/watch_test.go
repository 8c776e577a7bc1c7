package reload

import (
	"context"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

const ruleA = "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    limits: [1/s]\n"
const ruleB = "rules:\n  - name: b\n    action: x\n    kinds: [ip]\n    limits: [2/s]\n"
const ruleC = "rules:\n  - name: c\n    action: x\n    kinds: [ip]\n    limits: [3/s]\n"

func writeFile(tb testing.TB, path, content string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}

func waitRule(tb testing.TB, w *Watcher, name string) {
	tb.Helper()
	stacktest.WaitFor(tb, "rule "+name+" to be loaded", 5*time.Second, func() bool { return w.Current().Rule(name) != nil })
}

// start runs w until the test ends and returns once it is watching: a
// write or a signal before that would go unnoticed (and a SIGHUP before
// signal.Notify would kill the test binary).
func start(t *testing.T, w *Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case <-w.Watching():
	case err := <-done:
		t.Fatalf("watcher ended before watching: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("watcher not watching after 5s")
	}
}

func TestWatcherReloads(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "rules.yaml")
	writeFile(t, p, ruleA)
	w, err := NewWatcher(WatcherConfig{Path: p, Debounce: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)

	// In-place write.
	writeFile(t, p, ruleB)
	waitRule(t, w, "b")

	// A bad file is refused (counted) and keeps the last good rules.
	writeFile(t, p, "rules:\n  - name: bad\n    limits: [1/x]\n")
	stacktest.WaitFor(t, "the bad file to be refused", 5*time.Second, func() bool { return testutil.ToFloat64(w.reloads.WithLabelValues("error")) >= 1 })
	if w.Current().Rule("b") == nil {
		t.Fatal("bad file replaced the last good rules")
	}

	// Editor-style: write a temp file and rename it over the original.
	tmp := filepath.Join(dir, ".rules.yaml.swp")
	writeFile(t, tmp, ruleC)
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	waitRule(t, w, "c")
}

func TestWatcherRefusesBadInitialFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, p, "rules: 5\n")
	if _, err := NewWatcher(WatcherConfig{Path: p}); err == nil {
		t.Fatal("bad initial file accepted")
	}
}

// TestWatcherSIGHUP changes the file with file events debounced for an
// hour, so only the signal can load rule b.
func TestWatcherSIGHUP(t *testing.T) {
	p := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, p, ruleA)
	w, err := NewWatcher(WatcherConfig{Path: p, SIGHUP: true, Debounce: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	start(t, w)
	writeFile(t, p, ruleB)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitRule(t, w, "b")
	if got := testutil.ToFloat64(w.reloads.WithLabelValues("ok")); got != 1 {
		t.Fatalf("ok reloads = %v, want 1 (the signal's)", got)
	}
}
