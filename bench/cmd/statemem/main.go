// Command statemem measures what the limiter's in-memory decision state
// costs under the attack of issue 25: one event each from N invented IPv6
// addresses (each its own /64) against a 2/1h rule, so that every address
// is a held subject, plus D addresses with two events (denied). It writes
// them through the aggregator's own write path (live.Applier.Apply) under a
// key prefix of its own, loads the state as a limiter does (decide.Sync,
// HSCAN snapshots, --cap as --state-max-subjects), and reports the held
// subjects, heap and RSS per subject, the load time, and whether sampled
// denied subjects are denied and near ones allowed (from memory or, past
// the cap, by exact reads). It deletes its keys at the end.
//
//	go run ./bench/cmd/statemem -n 1000000 -denied 1000 -cap 200000
//
// docs/limiter.md ("Memory") has the figures and how to read them.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

const probeRules = `
rules:
  - name: probe-hourly
    action: probe
    kinds: [ip]
    limits: [2/1h]
`

func main() {
	var (
		addr    = flag.String("redis-addr", envOr("FLOODGATE_REDIS_ADDR", "127.0.0.1:16379"), "Redis of the stack")
		n       = flag.Int("n", 20000, "subjects with one event (held: at half of 2/1h)")
		denied  = flag.Int("denied", 1000, "subjects with two events (denied)")
		capN    = flag.Int("cap", 200000, "the state's cap (--state-max-subjects); 0: none")
		parts   = flag.Int("partitions", 12, "partitions the subjects spread over")
		samples = flag.Int("samples", 500, "checks of denied and of near subjects each")
		batch   = flag.Int("batch", 1000, "events per applied batch")
	)
	flag.Parse()
	if err := run(*addr, *n, *denied, *capN, *parts, *samples, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "statemem:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func subject(i int) string { return fmt.Sprintf("2001:db8:%x:%x::1", i>>16, i&0xffff) }

func run(addr string, n, denied, capN, parts, samples, batchSize int) error {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 16})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", addr, err)
	}
	prefix := fmt.Sprintf("fgstatemem-%d", time.Now().UnixNano())
	defer cleanup(ctx, rdb, prefix)
	set, err := rules.Parse([]byte(probeRules))
	if err != nil {
		return err
	}
	store, err := window.NewStore(rdb, window.StoreConfig{Prefix: prefix, Partitions: func() int { return parts }})
	if err != nil {
		return err
	}
	applier, err := live.NewApplier(store, live.ApplierConfig{})
	if err != nil {
		return err
	}
	now := time.Now()
	start := time.Now()
	// events per partition, keyed by the subject counted, as a producer
	byPart := make([][]event.Event, parts)
	offs := make([]int64, parts)
	flush := func(p int) error {
		evs := byPart[p]
		if len(evs) == 0 {
			return nil
		}
		b := consume.Batch{Topic: "statemem", Partition: p, First: offs[p]}
		for _, ev := range evs {
			b.Records = append(b.Records, consume.Record{Offset: offs[p], Event: ev})
			offs[p]++
		}
		b.Last = offs[p] - 1
		if _, err := applier.Apply(ctx, "statemem", b, set, now, nil); err != nil {
			return err
		}
		byPart[p] = byPart[p][:0]
		return nil
	}
	add := func(s string, per int) error {
		p := window.Partition(window.Subject{Action: "probe", Kind: "ip", Subject: set.Subject("ip", s)}, parts)
		for range per {
			byPart[p] = append(byPart[p], event.Event{V: 1, ID: event.NewID(), Action: "probe", Kind: "ip", Subject: s, TS: now, N: 1})
		}
		if len(byPart[p]) >= batchSize {
			return flush(p)
		}
		return nil
	}
	for i := range n {
		if err := add(subject(i), 1); err != nil {
			return err
		}
	}
	for i := range denied {
		if err := add(subject(n+i), 2); err != nil {
			return err
		}
	}
	for p := range parts {
		if err := flush(p); err != nil {
			return err
		}
	}
	fmt.Printf("applied %d near + %d denied subjects over %d partitions in %s\n", n, denied, parts, time.Since(start).Round(time.Millisecond))

	// the measurement starts from here: what the apply phase held is freed
	byPart = nil
	runtime.GC()
	debug.FreeOSMemory()
	resetPeakRSS()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	rssBefore := harness.SelfStatusKiB("VmRSS")

	state := decide.NewBoundedState(capN)
	lim, err := decide.New(decide.Config{Store: store, State: state, Partitions: func() int { return parts },
		Rules: func() *rules.Set { return set }, Timeout: 2 * time.Second})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	go func() {
		_ = decide.Sync(sctx, decide.SyncConfig{State: state, Source: store, Streams: rdb, Partitions: func() int { return parts }, Logger: quiet})
	}()
	load := time.Now()
	for !state.Loaded(parts) {
		if time.Since(load) > 10*time.Minute {
			return fmt.Errorf("state not loaded after 10m")
		}
		time.Sleep(10 * time.Millisecond)
	}
	loadTook := time.Since(load)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	held := state.Len()
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	fmt.Printf("state loaded in %s: %d subjects held (cap %d), %d left out or evicted, complete=%v\n",
		loadTook.Round(time.Millisecond), held, capN, state.Overflows(), state.Complete(time.Now()))
	fmt.Printf("heap: %d MiB held by the state, %.0f bytes per held subject\n", heap>>20, float64(heap)/float64(max(held, 1)))
	fmt.Printf("rss: %d MiB before loading, %d MiB after, peak while loading %d MiB\n",
		rssBefore>>10, harness.SelfStatusKiB("VmRSS")>>10, harness.SelfStatusKiB("VmHWM")>>10)

	check := func(s string) (bool, error) {
		d, err := lim.Check(ctx, decide.Request{Action: "probe", Subjects: []decide.Subject{{Kind: "ip", Subject: s}}})
		return d.Allowed, err
	}
	wrong := 0
	for k := range min(samples, denied) {
		i := n + k*max(denied/max(samples, 1), 1)
		if i >= n+denied {
			break
		}
		ok, err := check(subject(i))
		if err != nil {
			return err
		}
		if ok {
			wrong++
			fmt.Printf("WRONG: denied subject %s allowed\n", subject(i))
		}
	}
	for k := range min(samples, n) {
		i := k * max(n/max(samples, 1), 1)
		ok, err := check(subject(i))
		if err != nil {
			return err
		}
		if !ok {
			wrong++
			fmt.Printf("WRONG: near subject %s (1 of 2) denied\n", subject(i))
		}
	}
	fmt.Printf("checks: %d wrong answers of sampled denied and near subjects\n", wrong)
	runtime.KeepAlive(state)
	if wrong > 0 {
		return fmt.Errorf("%d wrong answers", wrong)
	}
	return nil
}

// resetPeakRSS resets VmHWM (Linux: "5" to clear_refs), so the peak read
// later is the state's load, not the apply phase's.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// cleanup deletes the run's keys (its own prefix only).
func cleanup(ctx context.Context, rdb *redis.Client, prefix string) {
	iter := rdb.Scan(ctx, 0, "{"+prefix+":p*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			rdb.Unlink(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		rdb.Unlink(ctx, keys...)
	}
}
