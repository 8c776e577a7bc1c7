package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// BenchmarkAggregatorEndToEnd measures the live path as deployed: events
// already on a 12-partition topic, one `floodgate aggregator --no-history`
// process reading them into Redis under the design notes' login rule
// (2/s, 5/m, 10/h, 100/d by ip). It reports events/s from the first applied
// batch to the last, and Redis commands per event (INFO commandstats delta;
// the stack's Redis is shared, so run it while nothing else uses it).
//
//	go test ./cmd/floodgate -run '^$' -bench AggregatorEndToEnd -benchtime 1x
func BenchmarkAggregatorEndToEnd(b *testing.B) {
	for _, tc := range []struct {
		name     string
		events   int
		subjects uint64
	}{
		{"subjects=1k", 200_000, 1_000},
		{"subjects=100k", 200_000, 100_000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchEndToEnd(b, tc.events, tc.subjects)
			}
		})
	}
}

// loginRules is the design notes' login rule.
const loginRules = `
rules:
  - name: login
    action: login_failed
    kinds: [ip]
    limits: [2/s, 5/m, 10/h, 100/d]
`

func benchEndToEnd(b *testing.B, n int, subjects uint64) {
	b.StopTimer()
	e := newLiveEnvTB(b, 12, loginRules)
	e.produceZipf(n, subjects)
	ends := e.logEnds()
	calls0 := stacktest.RedisCalls(b, e.rdb.(*redis.Client))
	p := e.start("bench")
	elapsed := e.timeApplied(ends)
	calls := stacktest.RedisCalls(b, e.rdb.(*redis.Client)) - calls0
	p.stop(b)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(calls)/float64(n), "redis-cmds/event")
	b.ReportMetric(0, "ns/op")
}

// produceZipf writes n login_failed events, their ips Zipf-distributed
// (s = 1.1) over subjects, as fast as the topic takes them (acks=all).
func (e *liveEnv) produceZipf(n int, subjects uint64) {
	e.t.Helper()
	ctx := context.Background()
	w := e.writer()
	w.BatchSize = 5000
	defer w.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	zipf := rand.NewZipf(rng, 1.1, 1, subjects-1)
	now := time.Now()
	msgs := make([]kafka.Message, 0, 10000)
	for i := 0; i < n; i++ {
		ev := event.Event{ID: event.NewID(), Action: "login_failed", Kind: "ip", Subject: "10.0." + strconv.FormatUint(zipf.Uint64(), 10), TS: now}
		v, err := event.Encode(ev)
		if err != nil {
			e.t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(ev.Key()), Value: v})
		if len(msgs) == cap(msgs) || i == n-1 {
			writeAll(e.t, ctx, w, msgs)
			msgs = msgs[:0]
		}
	}
}

// timeApplied waits until the live sink stored every partition's end in
// ends and returns the time from the first stored offset it saw to then.
func (e *liveEnv) timeApplied(ends map[int]int64) time.Duration {
	e.t.Helper()
	first := e.firstApplied()
	e.waitStored(ends)
	return time.Since(first)
}

// firstApplied waits until the live sink stored an offset of some
// partition and returns when it saw it.
func (e *liveEnv) firstApplied() time.Time {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		for part := 0; part < e.partitions; part++ {
			if _, ok, err := e.store.Resume(context.Background(), e.group, e.topic, part); err != nil {
				e.t.Fatal(err)
			} else if ok {
				return time.Now()
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("nothing applied after 5 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitStored waits until the live sink stored every partition's end.
func (e *liveEnv) waitStored(ends map[int]int64) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		done := 0
		for part, end := range ends {
			next, ok, err := e.store.Resume(context.Background(), e.group, e.topic, part)
			if err != nil {
				e.t.Fatal(err)
			}
			if ok && next >= end {
				done++
			}
		}
		if done == len(ends) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("not caught up after 5 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkClusterAggregatorScaleOut measures the live path on the cluster
// profile (three brokers, the events topic of 12 partitions replicated
// three times; Redis Cluster of 3 primaries) with one and two `floodgate
// aggregator --no-history` processes in one group, under the login rule.
// The processes join first and are then paused (SIGSTOP) while 200 000
// events over 10 000 Zipf subjects are produced, so that the group is
// settled and the producer does not set the pace; events/s runs from their
// SIGCONT until the last partition is applied.
//
//	go test ./cmd/floodgate -run '^$' -bench ClusterAggregatorScaleOut -benchtime 1x
func BenchmarkClusterAggregatorScaleOut(b *testing.B) {
	for _, procs := range []int{1, 2} {
		b.Run("processes="+strconv.Itoa(procs), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchScaleOut(b, procs, 200_000, 10_000)
			}
		})
	}
}

func benchScaleOut(b *testing.B, procs, n int, subjects uint64) {
	b.StopTimer()
	e := newEnv(b, envConfig{partitions: 12, rules: loginRules, cluster: true})
	// Paused members must keep their partitions while the topic fills.
	e.extraArgs = []string{"--session-timeout", "60s"}
	names := make([]string, procs)
	ps := make([]*proc, procs)
	for i := range procs {
		names[i] = "bench" + strconv.Itoa(i)
		ps[i] = e.start(names[i])
	}
	e.waitOwns(names...)
	signal := func(sig syscall.Signal) {
		for _, p := range ps {
			if err := p.cmd.Process.Signal(sig); err != nil {
				b.Fatal(err)
			}
		}
	}
	signal(syscall.SIGSTOP)
	e.produceZipf(n, subjects)
	ends := e.logEnds()
	aggCPU0 := procsCPU(b, ps)
	primCPU0, replCPU0 := e.redisCPU()
	start := time.Now()
	signal(syscall.SIGCONT)
	e.waitStored(ends)
	elapsed := time.Since(start)
	aggCPU := procsCPU(b, ps) - aggCPU0
	primCPU, replCPU := e.redisCPU()
	for _, p := range ps {
		p.stop(b)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	// CPU seconds per million events: what a deployment sizes cores by.
	b.ReportMetric(aggCPU/float64(n)*1e6, "aggregator-cpu-s/Mevents")
	b.ReportMetric((primCPU-primCPU0)/float64(n)*1e6, "redis-primaries-cpu-s/Mevents")
	b.ReportMetric((replCPU-replCPU0)/float64(n)*1e6, "redis-replicas-cpu-s/Mevents")
	b.ReportMetric(0, "ns/op")
}

// procsCPU sums the CPU time (user and system, seconds) the processes used
// so far, from /proc/PID/stat (clock ticks of 1/100 s).
func procsCPU(tb testing.TB, ps []*proc) float64 {
	tb.Helper()
	var ticks int64
	for _, p := range ps {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
		if err != nil {
			tb.Fatal(err)
		}
		// Fields after the command name (which may hold spaces): state is
		// the first, utime the 12th and stime the 13th.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		for _, i := range []int{11, 12} {
			n, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				tb.Fatalf("/proc/%d/stat: %v", p.cmd.Process.Pid, err)
			}
			ticks += n
		}
	}
	return float64(ticks) / 100
}

// redisCPU sums used_cpu_sys and used_cpu_user (seconds) of the Redis
// Cluster's primaries, and of its replicas (which apply the scripts'
// effects).
func (e *liveEnv) redisCPU() (primaries, replicas float64) {
	e.t.Helper()
	cc := e.rdb.(*redis.ClusterClient)
	var mu sync.Mutex
	sum := func(total *float64) func(context.Context, *redis.Client) error {
		return func(ctx context.Context, c *redis.Client) error {
			info, err := c.Info(ctx, "cpu").Result()
			if err != nil {
				return err
			}
			for _, line := range strings.Split(info, "\n") {
				k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
				if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
					x, err := strconv.ParseFloat(v, 64)
					if err != nil {
						return fmt.Errorf("INFO cpu of %s: %s: %w", c.Options().Addr, line, err)
					}
					mu.Lock()
					*total += x
					mu.Unlock()
				}
			}
			return nil
		}
	}
	ctx := context.Background()
	if err := cc.ForEachMaster(ctx, sum(&primaries)); err != nil {
		e.t.Fatal(err)
	}
	if err := cc.ForEachSlave(ctx, sum(&replicas)); err != nil {
		e.t.Fatal(err)
	}
	return primaries, replicas
}
