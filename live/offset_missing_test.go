package live_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"floodgate/aggregator"
	"floodgate/event"
	"floodgate/live"
	"floodgate/rules"
	"floodgate/stacktest"
	"floodgate/window"
)

// Redis losing the slot of a partition the sink had stored an offset for
// (a restart without persistence, a flush) is not taken for a new
// partition: the next batch is counted, and reported (ERROR log,
// floodgate_live_offset_missing_total).
func TestSinkReportsAnOffsetRedisLost(t *testing.T) {
	rdb := stacktest.Redis(t)
	prefix := stacktest.Prefix(t, rdb)
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: prefix, Partitions: func() int { return 1 }})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse([]byte("rules:\n  - name: r\n    action: a\n    kinds: [ip]\n    limits: [100/1h]\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ap, err := live.NewApplier(st, live.ApplierConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := live.NewSink(live.SinkConfig{Applier: ap, Group: "g", Rules: func() *rules.Set { return set }, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	batch := func(first int64) aggregator.Batch {
		b := aggregator.Batch{Topic: "t", First: first, Last: first + 1}
		for o := first; o <= first+1; o++ {
			b.Records = append(b.Records, aggregator.Record{Offset: o, Event: event.Event{V: 1, ID: event.NewID(), Action: "a", Kind: "ip", Subject: "192.0.2.1", TS: time.Now(), N: 1}})
		}
		return b
	}
	missing := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, mf := range mfs {
			if mf.GetName() == "floodgate_live_offset_missing_total" {
				for _, m := range mf.GetMetric() {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n
	}
	if err := sink.Apply(ctx, batch(0)); err != nil { // a partition's first batch: no offset yet, nothing lost
		t.Fatal(err)
	}
	if err := sink.Apply(ctx, batch(2)); err != nil {
		t.Fatal(err)
	}
	if n := missing(); n != 0 {
		t.Fatalf("offset_missing_total = %v before Redis lost anything", n)
	}
	if err := stacktest.DeletePrefix(ctx, rdb, prefix); err != nil { // Redis loses the slot
		t.Fatal(err)
	}
	if err := sink.Apply(ctx, batch(4)); err != nil {
		t.Fatal(err)
	}
	if n := missing(); n != 1 {
		t.Fatalf("offset_missing_total = %v after Redis lost the slot, want 1", n)
	}
	if next, ok, err := sink.Resume(ctx, "t", 0); err != nil || !ok || next != 6 {
		t.Fatalf("Resume = %d, %v, %v; want 6", next, ok, err)
	}
}

// The same with write-back: the loss shows at the next checkpoint (refused:
// the slot holds no checkpoint), and the batch after it, which finds no
// offset at all, is reported as lost data, not taken for a new partition.
func TestWriteBackSinkReportsAnOffsetRedisLost(t *testing.T) {
	rdb := stacktest.Redis(t)
	prefix := stacktest.Prefix(t, rdb)
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: prefix, Partitions: func() int { return 1 }})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse([]byte("rules:\n  - name: r\n    action: a\n    kinds: [ip]\n    limits: [100/1h]\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ap, err := live.NewApplier(st, live.ApplierConfig{WriteBack: true})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sink, err := live.NewSink(live.SinkConfig{Applier: ap, Group: "g", Rules: func() *rules.Set { return set }, Registerer: reg,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	next := int64(0)
	apply := func() error {
		b := aggregator.Batch{Topic: "t", First: next, Last: next + 1}
		for o := next; o <= next+1; o++ {
			b.Records = append(b.Records, aggregator.Record{Offset: o, Event: event.Event{V: 1, ID: event.NewID(), Action: "a", Kind: "ip", Subject: "192.0.2.1", TS: now, N: 1}})
		}
		err := sink.Apply(ctx, b)
		var rw *aggregator.RewindError
		if err == nil || errors.As(err, &rw) {
			next = b.Last + 1
			if rw != nil {
				next = rw.Next
			}
		}
		return err
	}
	missing := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, mf := range mfs {
			if mf.GetName() == "floodgate_live_offset_missing_total" {
				for _, m := range mf.GetMetric() {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n
	}
	for range 2 { // the partition's first batch has no offset yet: nothing lost
		if err := apply(); err != nil {
			t.Fatal(err)
		}
	}
	if n := missing(); n != 0 {
		t.Fatalf("offset_missing_total = %v before Redis lost anything", n)
	}
	if err := stacktest.DeletePrefix(ctx, rdb, prefix); err != nil { // Redis loses the slot
		t.Fatal(err)
	}
	now = now.Add(3 * time.Second) // a checkpoint is due after the next batch: refused
	for range 3 {
		_ = apply() // the batch after the refusal rewinds, then is applied
	}
	if n := missing(); n != 1 {
		t.Fatalf("offset_missing_total = %v after Redis lost the slot, want 1", n)
	}
}
