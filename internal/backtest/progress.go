package backtest

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// startProgress prints a line to cfg.Progress every cfg.ProgressEvery
// while the partitions replay; stop prints the last and ends it.
func startProgress(cfg *Config, parts []*partition, source string) (stop func()) {
	if cfg.Progress == nil {
		return func() {}
	}
	start := time.Now()
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(cfg.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprintln(cfg.Progress, progressLine(parts, source, time.Since(start)))
				return
			case <-t.C:
				fmt.Fprintln(cfg.Progress, progressLine(parts, source, time.Since(start)))
			}
		}
	}()
	return func() {
		close(quit)
		wg.Wait()
	}
}

// progressLine says how far the replay is: offsets read of those to read
// (Kafka), partitions finished, events/s so far, and the clock of the
// partition furthest behind.
func progressLine(parts []*partition, source string, took time.Duration) string {
	var read, total, events int64
	done := 0
	var behind int64
	for _, p := range parts {
		st := p.stats
		read += st.next.Load() - st.start
		total += st.end - st.start
		events += st.events.Load()
		if st.end > 0 && st.next.Load() >= st.end {
			done++
			continue
		}
		if c := st.clock.Load(); c > 0 && (behind == 0 || c < behind) {
			behind = c
		}
	}
	rate := float64(events) / max(took.Seconds(), 1e-9)
	at := "-"
	if behind > 0 {
		at = time.UnixMilli(behind).UTC().Format(time.RFC3339)
	}
	if source == "history" {
		return fmt.Sprintf("backtest: %s minute rows from history, %s/s, at %s, %s", human(events), human(int64(rate)), at, took.Round(time.Second))
	}
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(read) / float64(total)
	}
	return fmt.Sprintf("backtest: %.1f%% of %s offsets, %d of %d partitions done, %s events/s, slowest partition at %s, %s",
		pct, human(total), done, len(parts), human(int64(rate)), at, took.Round(time.Second))
}

// human writes n with thousands separators.
func human(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return s
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
