package window_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"floodgate/aggregator"
	"floodgate/event"
	"floodgate/rules"
	"floodgate/window"
)

// redisClient connects to the stack's Redis (FLOODGATE_REDIS_ADDR, default
// 127.0.0.1:16379). It fails the test when Redis is down, except under -short.
func redisClient(tb testing.TB) *redis.Client {
	tb.Helper()
	addr := os.Getenv("FLOODGATE_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:16379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		if testing.Short() {
			tb.Skipf("redis at %s: %v (skipped under -short)", addr, err)
		}
		tb.Fatalf("redis at %s: %v (start it with scripts/stack up)", addr, err)
	}
	tb.Cleanup(func() {
		if err := rdb.Close(); err != nil {
			tb.Error(err)
		}
	})
	return rdb
}

var prefixSeq atomic.Int64

// testPrefix returns a key prefix unique to this test run and deletes its
// keys at the end: other engineers' tests share this Redis.
func testPrefix(tb testing.TB, rdb *redis.Client) string {
	tb.Helper()
	p := fmt.Sprintf("fgtest-%d-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9, prefixSeq.Add(1))
	tb.Cleanup(func() { deletePrefix(tb, rdb, p) })
	return p
}

func deletePrefix(tb testing.TB, rdb *redis.Client, p string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, p+":*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 500 {
			rdb.Unlink(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		rdb.Unlink(ctx, keys...)
	}
	if err := iter.Err(); err != nil {
		tb.Errorf("clean up keys %s:*: %v", p, err)
	}
}

func newStore(tb testing.TB, rdb *redis.Client) *window.Store {
	tb.Helper()
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: testPrefix(tb, rdb)})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

func mustRules(tb testing.TB, yaml string) *rules.Set {
	tb.Helper()
	s, err := rules.Parse([]byte(strings.TrimLeft(yaml, "\n")))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// batcher hands out batches of consecutive offsets for one partition.
type batcher struct {
	topic     string
	partition int
	next      int64
}

func (b *batcher) batch(evs ...event.Event) aggregator.Batch {
	out := aggregator.Batch{Topic: b.topic, Partition: b.partition, First: b.next}
	for _, e := range evs {
		if e.N == 0 {
			e.N = 1
		}
		out.Records = append(out.Records, aggregator.Record{Offset: b.next, Event: e})
		b.next++
	}
	if len(evs) == 0 {
		b.next++
	}
	out.Last = b.next - 1
	return out
}

func ev(action, kind, subject string, ts time.Time) event.Event {
	return event.Event{V: 1, ID: event.NewID(), Action: action, Kind: kind, Subject: subject, TS: ts, N: 1}
}

// base is a fixed day boundary plus 12h, in the future so that no test key
// lands in a bucket that real time could make meaningful to anyone else.
var base = time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)

type (
	eventT = event.Event
	batchT = aggregator.Batch
)

func recordAt(off int64, e event.Event) aggregator.Record {
	return aggregator.Record{Offset: off, Event: e}
}
