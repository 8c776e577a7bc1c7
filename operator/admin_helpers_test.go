package operator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"floodgate/aggregator"
	"floodgate/event"
	"floodgate/live"
	"floodgate/operator"
	"floodgate/rules"
	"floodgate/stacktest"
	"floodgate/window"
)

func newStore(tb testing.TB, rdb *redis.Client) *window.Store {
	tb.Helper()
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(tb, rdb), Partitions: onePartition})
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

// onePartition puts every subject in partition 0, where the tests'
// batches are.
func onePartition() int { return 1 }

// applierOf returns the live path's Applier over st, with its defaults.
func applierOf(tb testing.TB, st *window.Store) *live.Applier {
	tb.Helper()
	ap, err := live.NewApplier(st, live.ApplierConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	return ap
}

// writerOf returns the operator's Writer over st.
func writerOf(tb testing.TB, st *window.Store) *operator.Writer {
	tb.Helper()
	w, err := operator.NewWriter(st)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}
