package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/internal/window"
)

const hotRules = countRules + `
  - name: hot
    action: hot
    kinds: [k]
    limits: [3/1m]
    message: too hot
`

// TestDecisionSurvivesCrashBeforePublish: the decisions topic is gone, so
// the relay cannot publish; the apply script has written the decision into
// the partition's change stream with the counts. The aggregator is
// SIGKILLed there — counted, not published — and restarted once the topic
// is back: the decision reaches the topic, with the id of its change entry.
// Then the relay's cursor is moved back, as a crash between publishing and
// moving it would leave it: the decision is published again with the same
// id, by which a consumer recognises the duplicate.
func TestDecisionSurvivesCrashBeforePublish(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 2, hotRules)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	hot := window.Subject{Action: "hot", Kind: "k", Subject: "h1"}
	part := window.Partition(hot, e.partitions)
	keys := e.store.Keys()

	// The aggregator refuses to start without its decisions topic: the
	// topic goes once it runs.
	p := e.start("run0")
	e.waitStarted("run0")
	if err := topics.Delete(ctx, e.brokers, e.decisions); err != nil {
		t.Fatal(err)
	}
	w := e.writer()
	defer w.Close()
	for range 5 {
		v, err := event.Encode(event.Event{ID: event.NewID(), Action: "hot", Kind: "k", Subject: "h1", TS: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		writeAll(t, ctx, w, []kafka.Message{{Key: []byte("k:h1"), Value: v}})
	}
	// Counted: the change entry with the decision is in the stream.
	var entry string
	for entry == "" {
		msgs, err := e.rdb.XRange(ctx, keys.Log(part), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			c, err := window.ParseChange(m)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Decisions) > 0 && entry == "" {
				entry = c.ID
			}
		}
		if entry == "" {
			if ctx.Err() != nil {
				t.Fatal("no change entry with a decision")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Not published: the relay's cursor has not reached it.
	if cur, err := e.rdb.Get(ctx, keys.Relay(part)).Result(); err == nil && !cursorBefore(cur, entry) {
		t.Fatalf("relay cursor %q is at or past entry %s with no decisions topic", cur, entry)
	}
	p.kill(t)

	if _, err := topics.Ensure(ctx, e.brokers, topics.Spec{Name: e.decisions, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	p = e.start("run1")
	want := "p" + strconv.Itoa(part) + "-" + entry + "-0"
	ds := readDecisions(t, ctx, e, 1)
	if ds[0].ID != want || ds[0].Subject != "h1" || ds[0].Rule != "hot" {
		t.Fatalf("decision after the restart: %+v, want id %s for h1 and rule hot", ds[0], want)
	}
	p.stop(t)

	// A crash after publishing, before the cursor moved.
	if err := e.rdb.Set(ctx, keys.Relay(part), "0-0 0", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p = e.start("run2")
	defer p.stop(t)
	ds = readDecisions(t, ctx, e, 2)
	if ds[1].ID != ds[0].ID {
		t.Fatalf("decision published again with id %s, first as %s: duplicates must carry the same id", ds[1].ID, ds[0].ID)
	}
}

// waitStarted waits until the aggregator name logged that it started
// its partitions.
func (e *liveEnv) waitStarted(name string) {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(filepath.Join(e.dir, name+".log"))
		if strings.Count(string(b), "partition started") >= e.partitions {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s did not start its %d partitions:\n%s", name, e.partitions, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cursorBefore reports whether the relay cursor "<entry id> <seq>" is
// before the stream entry id.
func cursorBefore(cursor, id string) bool {
	cid, _, _ := strings.Cut(cursor, " ")
	return compareIDs(cid, id) < 0
}

func compareIDs(a, b string) int {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	for _, p := range [][2]string{{am, bm}, {as, bs}} {
		if len(p[0]) != len(p[1]) {
			return len(p[0]) - len(p[1])
		}
		if c := strings.Compare(p[0], p[1]); c != 0 {
			return c
		}
	}
	return 0
}

// readDecisions reads the decisions topic from its start until it holds n
// messages.
func readDecisions(tb testing.TB, ctx context.Context, e *liveEnv, n int) []window.DecisionMessage {
	tb.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: e.decisions, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	var out []window.DecisionMessage
	for len(out) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			tb.Fatalf("read decisions (%d of %d): %v", len(out), n, err)
		}
		var d window.DecisionMessage
		if err := json.Unmarshal(m.Value, &d); err != nil {
			tb.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// TestRebuildRefusesBesideRunningAggregator runs `floodgate rebuild
// --reset` while a live aggregator of the same group runs: it must refuse
// with a clear error and write nothing (a reset would delete the offsets
// the running aggregator then writes again, and every replayed batch would
// be taken for a duplicate: no counter rebuilt, no error).
func TestRebuildRefusesBesideRunningAggregator(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 3, countRules)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	p := e.start("run")
	defer p.stop(t)
	w := e.writer()
	defer w.Close()
	e.produce(ctx, w, "crash", subjects(20), 200, 0)
	e.waitExact("crash", 90*time.Second)
	keysBefore := e.keyCount(ctx)

	cmd := exec.CommandContext(ctx, e.bin, "rebuild", "--reset",
		"--brokers", strings.Join(e.brokers, ","), "--redis-addr", strings.Join(e.redisAddrs, ","),
		"--topic", e.topic, "--live-group", e.group, "--key-prefix", e.prefix, "--rules", e.rulesPath)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("rebuild beside a running aggregator: %v, want a failed exit\n%s", err, out)
	}
	for _, want := range []string{"live group " + e.group, "running members", "stop every live aggregator first"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rebuild's error lacks %q:\n%s", want, out)
		}
	}
	if n := e.keyCount(ctx); n != keysBefore {
		t.Errorf("%d keys under the prefix after the refused rebuild, %d before", n, keysBefore)
	}
	e.waitExact("crash", time.Second)
	e.checkOffsets()
}

// keyCount counts the keys of the env's prefix.
func (e *liveEnv) keyCount(ctx context.Context) int {
	e.t.Helper()
	n := 0
	iter := e.rdb.Scan(ctx, 0, e.store.Keys().Pattern(), 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	if err := iter.Err(); err != nil {
		e.t.Fatal(err)
	}
	return n
}
