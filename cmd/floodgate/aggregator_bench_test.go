package main

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"floodgate/event"
	"floodgate/stacktest"
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

func benchEndToEnd(b *testing.B, n int, subjects uint64) {
	b.StopTimer()
	e := newLiveEnvTB(b, 12, `
rules:
  - name: login
    action: login_failed
    kinds: [ip]
    limits: [2/s, 5/m, 10/h, 100/d]
`)
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
			b.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(ev.Key()), Value: v})
		if len(msgs) == cap(msgs) || i == n-1 {
			writeAll(b, ctx, w, msgs)
			msgs = msgs[:0]
		}
	}
	ends := e.logEnds()
	calls0 := stacktest.RedisCalls(b, e.rdb.(*redis.Client))
	p := e.start("bench")
	// Time from the first stored offset to the last.
	var first time.Time
	deadline := time.Now().Add(5 * time.Minute)
	for {
		done, any := 0, false
		for part, end := range ends {
			next, ok, err := e.store.Resume(ctx, e.group, e.topic, part)
			if err != nil {
				b.Fatal(err)
			}
			any = any || ok
			if ok && next >= end {
				done++
			}
		}
		if any && first.IsZero() {
			first = time.Now()
		}
		if done == len(ends) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("not caught up after 5 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(first)
	calls := stacktest.RedisCalls(b, e.rdb.(*redis.Client)) - calls0
	p.stop(b)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(calls)/float64(n), "redis-cmds/event")
	b.ReportMetric(0, "ns/op")
}
