package windowtest

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// Base is a fixed day boundary plus 12h, in the future so that no test key
// lands in a bucket that real time could make meaningful to anyone else.
var Base = time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)

// NewStore returns a store under a key prefix of the test's own (deleted
// when it ends), every subject in partition 0, where Batcher's batches are.
func NewStore(tb testing.TB, rdb *redis.Client) *window.Store {
	tb.Helper()
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(tb, rdb), Partitions: OnePartition})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// OnePartition puts every subject in partition 0.
func OnePartition() int { return 1 }

// MustRules parses a rules file of the test's, failing it on error.
func MustRules(tb testing.TB, yaml string) *rules.Set {
	tb.Helper()
	s, err := rules.Parse([]byte(strings.TrimLeft(yaml, "\n")))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Batcher hands out batches of consecutive offsets for one partition.
type Batcher struct {
	Topic     string
	Partition int
	Next      int64
}

// Batch is the next batch holding evs (an event's N defaults to 1); with
// no events, an empty batch of one offset.
func (b *Batcher) Batch(evs ...event.Event) consume.Batch {
	out := consume.Batch{Topic: b.Topic, Partition: b.Partition, First: b.Next}
	for _, e := range evs {
		if e.N == 0 {
			e.N = 1
		}
		out.Records = append(out.Records, consume.Record{Offset: b.Next, Event: e})
		b.Next++
	}
	if len(evs) == 0 {
		b.Next++
	}
	out.Last = b.Next - 1
	return out
}

// Event is one event of action by kind=subject at ts.
func Event(action, kind, subject string, ts time.Time) event.Event {
	return event.Event{V: 1, ID: event.NewID(), Action: action, Kind: kind, Subject: subject, TS: ts, N: 1}
}

// Seed returns the seed of a randomized test: FLOODGATE_ACCURACY_SEED when
// set, else the clock's. It logs it, so that a failure can be reproduced.
func Seed(tb testing.TB) uint64 {
	tb.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FLOODGATE_ACCURACY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			tb.Fatalf("FLOODGATE_ACCURACY_SEED=%q: %v", s, err)
		}
		seed = v
	}
	tb.Logf("seed %d (FLOODGATE_ACCURACY_SEED reproduces)", seed)
	return seed
}
