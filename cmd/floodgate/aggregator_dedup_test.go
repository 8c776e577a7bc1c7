package main

import (
	"bufio"
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// TestAggregatorCrashDedupHistory SIGKILLs `floodgate aggregator --dedup 10m`
// (live and history groups) while events flow, a quarter of them copies of
// events sent before (a producer's retries: in the same write, in later
// writes, across kills): at the end every subject's live counter and history
// total equal its distinct event ids, and both paths' metrics counted the
// copies the last process saw as duplicates.
func TestAggregatorCrashDedupHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{partitions: 4, rules: countRules, history: true})
	e.extraArgs = []string{"--dedup", "10m"}
	ctx := context.Background()
	w := e.writer()
	defer w.Close()
	subs := subjects(30)
	r := rand.New(rand.NewPCG(13, 13))

	var sent []kafka.Message // each distinct event once
	copies := 0
	send := func(n int, copyShare int) {
		msgs := make([]kafka.Message, 0, n)
		for range n {
			if len(sent) > 0 && r.IntN(100) < copyShare {
				m := sent[r.IntN(len(sent))]
				msgs = append(msgs, kafka.Message{Key: m.Key, Value: m.Value})
				copies++
				continue
			}
			s := subs[r.IntN(len(subs))]
			ev := event.Event{ID: event.NewID(), Action: "crash", Kind: "k", Subject: s, TS: time.Now()}
			v, err := event.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			m := kafka.Message{Key: []byte(ev.Key()), Value: v}
			msgs = append(msgs, m)
			sent = append(sent, m)
			e.mu.Lock()
			e.produced[s]++ // distinct ids per subject
			e.mu.Unlock()
		}
		writeAll(t, ctx, w, msgs)
	}

	p := e.crashRounds(t, 3, 25, 15, func() { send(80, 25) })
	send(500, 40)
	t.Logf("%d distinct events, %d copies", len(sent), copies)

	e.waitExact("crash", 90*time.Second)
	waitHistoryExact(t, e, 90*time.Second)

	// The last process counted copies as duplicates on both paths.
	body, err := httpGet(metricsAddr(t, e, p.name))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"floodgate_live_events_total", "floodgate_history_events_total"} {
		if v := metricValue(body, name, `result="duplicate"`); v <= 0 {
			t.Errorf("%s{result=\"duplicate\"} = %v in the last process, want > 0", name, v)
		}
	}
	p.stop(t)
	e.checkOffsets()
}

// waitHistoryExact waits until history's total of every produced subject
// equals its produced count (distinct ids), and fails at once on a total
// above it (a double count).
func waitHistoryExact(t *testing.T, e *liveEnv, within time.Duration) {
	t.Helper()
	var got map[string]int64
	stacktest.WaitFor(t, "history totals equal to the distinct ids", within, func() bool {
		got = e.historyTotals("crash")
		e.mu.Lock()
		defer e.mu.Unlock()
		exact := len(got) == len(e.produced)
		for s, n := range e.produced {
			if got[s] > n {
				t.Fatalf("history: subject %s counted %d, %d distinct ids: double count", s, got[s], n)
			}
			exact = exact && got[s] == n
		}
		return exact
	})
	t.Logf("history: all %d subjects exact", len(got))
}

// metricsAddr returns the /metrics URL the named process logged.
func metricsAddr(t *testing.T, e *liveEnv, name string) string {
	t.Helper()
	var addr string
	stacktest.WaitFor(t, name+" logging its metrics address", 20*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(e.dir, name+".log"))
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if i := strings.Index(sc.Text(), "metrics=http://"); i >= 0 {
				addr = strings.Fields(sc.Text()[i+len("metrics="):])[0]
				return true
			}
		}
		return false
	})
	return addr
}

// metricValue sums the samples of name whose labels contain label.
func metricValue(body, name, label string) float64 {
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, label) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}
