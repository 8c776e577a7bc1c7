package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/stacktest/promtext"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// lostEnv is a liveEnv whose aggregator runs both groups: live into Redis,
// history into a database of the test's own.
type lostEnv struct {
	*liveEnv
	hist  string // history group
	subs  []string
	sent  int
	parts map[string]int // subject -> partition
}

func newLostEnv(t *testing.T, partitions int) *lostEnv {
	t.Helper()
	e := &lostEnv{liveEnv: newEnv(t, envConfig{partitions: partitions, rules: countRules, history: true}), parts: map[string]int{}}
	e.hist = e.historyGroup
	// Four subjects on each partition, so every partition has events.
	per := map[int]int{}
	for _, s := range subjects(1000) {
		p := window.Partition(window.Subject{Action: "crash", Kind: "k", Subject: s}, partitions)
		if per[p] < 4 {
			per[p]++
			e.subs = append(e.subs, s)
			e.parts[s] = p
		}
		if len(e.subs) == 4*partitions {
			break
		}
	}
	return e
}

// start runs the aggregator with both groups and metrics on a port of its
// own; it returns the metrics URL.
func (e *lostEnv) start(name string, args ...string) (*proc, string) {
	e.t.Helper()
	addr := servicetest.FreeAddr(e.t)
	p := e.run(name, append([]string{"--metrics-addr", addr, "--history-group", e.hist,
		"--postgres-url", e.pgURL}, args...)...)
	if err := childproc.WaitHTTP(context.Background(), "http://"+addr+"/healthz", time.Minute); err != nil {
		e.t.Fatalf("%s not serving: %v", name, err)
	}
	return p, "http://" + addr + "/metrics"
}

// produceRound writes n events round-robin over the subjects.
func (e *lostEnv) produceRound(ctx context.Context, n int) {
	e.t.Helper()
	w := e.writer()
	defer w.Close()
	e.produce(ctx, w, "crash", e.subs, n, e.sent)
	e.sent += n
}

// offsets returns the live and history groups' stored next offsets.
func (e *lostEnv) offsets(ctx context.Context) (live, hist map[int]int64) {
	e.t.Helper()
	live, hist = map[int]int64{}, map[int]int64{}
	for p := range e.partitions {
		n, ok, err := e.store.Resume(ctx, e.group, e.topic, p)
		if err != nil {
			e.t.Fatal(err)
		}
		if ok {
			live[p] = n
		}
	}
	rows, err := e.pool.Query(ctx, `SELECT "partition", next_offset FROM floodgate.consumer_offsets WHERE consumer_group = $1 AND topic = $2`, e.hist, e.topic)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var p int
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			e.t.Fatal(err)
		}
		hist[p] = n
	}
	return live, hist
}

// waitOffsets waits until both groups stored, for each partition of want,
// its offset.
func (e *lostEnv) waitOffsets(ctx context.Context, want map[int]int64) {
	e.t.Helper()
	for {
		live, hist := e.offsets(ctx)
		done := true
		for p, w := range want {
			done = done && live[p] == w && hist[p] == w
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("stored offsets live %v, history %v; want %v", live, hist, want)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dropped removes from what the test expects counted the events of
// partition p in [from, to), about to be deleted.
func (e *lostEnv) dropped(ctx context.Context, p int, from, to int64) {
	e.t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: e.topic, Partition: p, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(from); err != nil {
		e.t.Fatal(err)
	}
	for off := from; off < to; {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		ev, err := event.Decode(m.Value)
		if err != nil {
			e.t.Fatal(err)
		}
		e.mu.Lock()
		e.produced[ev.Subject]--
		e.mu.Unlock()
		off = m.Offset + 1
	}
}

// checkCounts compares Redis and Postgres with what the test expects, for
// the subjects of the given partitions.
func (e *lostEnv) checkCounts(ctx context.Context, parts ...int) {
	e.t.Helper()
	live, err := e.counters("crash")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range e.subs {
		if !containsInt(parts, e.parts[s]) {
			continue
		}
		var pg int64
		if err := e.pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0) FROM floodgate.history_totals WHERE action = 'crash' AND kind = 'k' AND subject = $1`, s).Scan(&pg); err != nil {
			e.t.Fatal(err)
		}
		if want := e.produced[s]; live[s] != want || pg != want {
			e.t.Errorf("subject %s (partition %d): Redis %d, Postgres %d; want %d", s, e.parts[s], live[s], pg, want)
		}
	}
}

// logOf returns an aggregator's log so far.
func (e *lostEnv) logOf(name string) string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, name+".log"))
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

// errorLines returns the ERROR lines of log that contain every one of want.
func errorLines(log string, want ...string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "level=ERROR") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestAggregatorRetentionGap stops the aggregator, lets events pile up,
// deletes the oldest of them on partition 0 as retention would (records
// nobody counted), and restarts it. With skip, each group logs an ERROR
// naming itself, the partition and the offsets lost, counts them in
// floodgate_aggregator_skipped_offsets_total and counts every event after
// them; with stop, partition 0 stops (floodgate_aggregator_partition_stopped)
// where it stood and the other partitions carry on.
func TestAggregatorRetentionGap(t *testing.T) {
	for _, policy := range []string{"skip", "stop"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			e := newLostEnv(t, 3)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			p, _ := e.start("before")
			e.produceRound(ctx, 36)
			e.waitOffsets(ctx, e.logEnds())
			p.stop(t)

			stored, _ := e.offsets(ctx)
			e.produceRound(ctx, 36)
			ends := e.logEnds()
			cut := ends[0] - 2 // the last 2 piled up stay
			if cut <= stored[0] {
				t.Fatalf("partition 0: stored %d, end %d: nothing to delete", stored[0], ends[0])
			}
			e.dropped(ctx, 0, stored[0], cut)
			if _, err := topics.DeleteRecords(ctx, e.brokers, e.topic, map[int]int64{0: cut}); err != nil {
				t.Fatal(err)
			}
			lost := cut - stored[0]
			e.produceRound(ctx, 36)
			ends = e.logEnds()

			p, metrics := e.start("after", "--on-lost-offsets", policy)
			defer p.stop(t)
			if policy == "skip" {
				e.waitOffsets(ctx, ends)
				e.checkCounts(ctx, 0, 1, 2)
			} else {
				e.waitOffsets(ctx, map[int]int64{1: ends[1], 2: ends[2]})
				e.checkCounts(ctx, 1, 2)
			}
			m, err := promtext.Scrape(ctx, metrics)
			if err != nil {
				t.Fatal(err)
			}
			log := e.logOf("after")
			for _, g := range []string{e.group, e.hist} {
				grp := `group="` + g + `"`
				if policy == "skip" {
					if got := m.Sum("floodgate_aggregator_skipped_offsets_total", grp, `partition="0"`); got != float64(lost) {
						t.Errorf("group %s: skipped offsets of partition 0 = %v, want %d", g, got, lost)
					}
					if got := m.Sum("floodgate_aggregator_skipped_offsets_total", grp); got != float64(lost) {
						t.Errorf("group %s: skipped offsets = %v, want %d, all of partition 0", g, got, lost)
					}
					want := []string{"group=" + g + " ", "partition=0", fmt.Sprintf("from=%d to=%d lost=%d", stored[0], cut-1, lost)}
					if len(errorLines(log, want...)) != 1 {
						t.Errorf("group %s: want one ERROR line with %q:\n%s", g, want, log)
					}
					continue
				}
				// stop: waiting on a gauge, not on a sleep.
				for m.Sum("floodgate_aggregator_partition_stopped", grp, `partition="0"`) != 1 {
					if ctx.Err() != nil {
						t.Fatalf("group %s: partition 0 not reported stopped", g)
					}
					time.Sleep(100 * time.Millisecond)
					if m, err = promtext.Scrape(ctx, metrics); err != nil && ctx.Err() == nil {
						t.Fatal(err)
					}
				}
				if got := m.Sum("floodgate_aggregator_partition_stopped", grp); got != 1 {
					t.Errorf("group %s: %v partitions stopped, want 1", g, got)
				}
				if len(errorLines(e.logOf("after"), "group="+g+" ", "partition=0", "partition stopped", fmt.Sprintf("from=%d to=%d", stored[0], cut))) != 1 {
					t.Errorf("group %s: want one ERROR line naming the stopped partition and its offsets:\n%s", g, e.logOf("after"))
				}
			}
			if policy == "stop" {
				live, hist := e.offsets(ctx)
				if live[0] != stored[0] || hist[0] != stored[0] {
					t.Errorf("stopped partition 0 moved: live %d, history %d; want %d", live[0], hist[0], stored[0])
				}
			}
		})
	}
}

// TestAggregatorTopicRecreated deletes and recreates the topic while the
// aggregator is stopped: the offsets the groups stored lie beyond the new
// log's end. With skip, each group logs an ERROR, counts a reset in
// floodgate_aggregator_offset_resets_total per partition, moves its stored
// offset back and counts the new log (on top of the old counts); with stop,
// every partition stops.
func TestAggregatorTopicRecreated(t *testing.T) {
	for _, policy := range []string{"skip", "stop"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			e := newLostEnv(t, 2)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			p, _ := e.start("before")
			e.produceRound(ctx, 48)
			e.waitOffsets(ctx, e.logEnds())
			p.stop(t)
			stored, _ := e.offsets(ctx)

			recreateTopic(t, ctx, e.brokers, e.topic, e.partitions)
			e.produceRound(ctx, 12) // fewer than the stored offsets: beyond the new end
			ends := e.logEnds()
			for part, end := range ends {
				if end >= stored[part] {
					t.Fatalf("partition %d: new end %d reaches the stored offset %d", part, end, stored[part])
				}
			}

			p, metrics := e.start("after", "--on-lost-offsets", policy)
			defer p.stop(t)
			if policy == "skip" {
				e.waitOffsets(ctx, ends)
				e.checkCounts(ctx, 0, 1)
			}
			var m promtext.Sample
			for {
				var err error
				if m, err = promtext.Scrape(ctx, metrics); err != nil && ctx.Err() == nil {
					t.Fatal(err)
				}
				metric := "floodgate_aggregator_offset_resets_total"
				if policy == "stop" {
					metric = "floodgate_aggregator_partition_stopped"
				}
				if m.Sum(metric, `group="`+e.group+`"`) == 2 && m.Sum(metric, `group="`+e.hist+`"`) == 2 {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("%s: %v in live, %v in history; want 2 each", metric, m.Sum(metric, `group="`+e.group+`"`), m.Sum(metric, `group="`+e.hist+`"`))
				}
				time.Sleep(100 * time.Millisecond)
			}
			log := e.logOf("after")
			for _, g := range []string{e.group, e.hist} {
				for part := range e.partitions {
					want := []string{"group=" + g + " ", fmt.Sprintf("partition=%d", part), "beyond"}
					if policy == "skip" {
						want = append(want, fmt.Sprintf("stored=%d log_start=0", stored[part]))
					} else {
						want = append(want, fmt.Sprintf("from=%d to=0", stored[part]), "partition stopped")
					}
					if len(errorLines(log, want...)) != 1 {
						t.Errorf("want one ERROR line with %q:\n%s", want, log)
					}
				}
			}
			if policy == "stop" {
				live, hist := e.offsets(ctx)
				for part := range e.partitions {
					if live[part] != stored[part] || hist[part] != stored[part] {
						t.Errorf("stopped partition %d moved: live %d, history %d; want %d", part, live[part], hist[part], stored[part])
					}
				}
			}
		})
	}
}

// recreateTopic deletes topic, waits until the brokers no longer know it,
// and creates it again, empty.
func recreateTopic(tb testing.TB, ctx context.Context, brokers []string, topic string, partitions int) {
	tb.Helper()
	if err := topics.Delete(ctx, brokers, topic); err != nil {
		tb.Fatal(err)
	}
	for {
		res, err := topics.Ensure(ctx, brokers, topics.Spec{Name: topic, Partitions: partitions})
		if err == nil && res[0].Created {
			return
		}
		if ctx.Err() != nil {
			tb.Fatalf("recreate topic %s: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
