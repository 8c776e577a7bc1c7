package live_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"floodgate/aggregator"
	"floodgate/event"
	"floodgate/live"
	"floodgate/rules"
	"floodgate/stacktest"
	"floodgate/window"
)

// lossEnv is a sink over one partition of its own key prefix, on a clock
// the test moves, and the count of losses it reported.
type lossEnv struct {
	t      *testing.T
	rdb    *redis.Client
	prefix string
	sink   *live.Sink
	reg    *prometheus.Registry
	now    time.Time
}

func newLossEnv(t *testing.T, writeBack bool) *lossEnv {
	e := &lossEnv{t: t, rdb: stacktest.Redis(t), reg: prometheus.NewRegistry(), now: time.Now()}
	e.prefix = stacktest.Prefix(t, e.rdb)
	st, err := window.NewStore(e.rdb, window.StoreConfig{Prefix: e.prefix, Partitions: func() int { return 1 }})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse([]byte("rules:\n  - name: r\n    action: a\n    kinds: [ip]\n    limits: [100/1h]\n"))
	if err != nil {
		t.Fatal(err)
	}
	ap, err := live.NewApplier(st, live.ApplierConfig{WriteBack: writeBack})
	if err != nil {
		t.Fatal(err)
	}
	e.sink, err = live.NewSink(live.SinkConfig{Applier: ap, Group: "g", Rules: func() *rules.Set { return set },
		Registerer: e.reg, Now: func() time.Time { return e.now }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// batch is two events of one subject from offset first.
func (e *lossEnv) batch(first int64) aggregator.Batch {
	b := aggregator.Batch{Topic: "t", First: first, Last: first + 1}
	for o := first; o <= first+1; o++ {
		b.Records = append(b.Records, aggregator.Record{Offset: o, Event: event.Event{V: 1, ID: event.NewID(), Action: "a", Kind: "ip", Subject: "192.0.2.1", TS: e.now, N: 1}})
	}
	return b
}

// lose deletes every key of the prefix: Redis lost the slot.
func (e *lossEnv) lose() {
	if err := stacktest.DeletePrefix(context.Background(), e.rdb, e.prefix); err != nil {
		e.t.Fatal(err)
	}
}

// missing is floodgate_live_offset_missing_total.
func (e *lossEnv) missing() float64 {
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
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

// Redis losing the slot of a partition the sink had stored an offset for
// (a restart without persistence, a flush) is not taken for a new
// partition: the next batch is counted, and reported (ERROR log,
// floodgate_live_offset_missing_total).
func TestSinkReportsAnOffsetRedisLost(t *testing.T) {
	e := newLossEnv(t, false)
	ctx := context.Background()
	if err := e.sink.Apply(ctx, e.batch(0)); err != nil { // a partition's first batch: no offset yet, nothing lost
		t.Fatal(err)
	}
	if err := e.sink.Apply(ctx, e.batch(2)); err != nil {
		t.Fatal(err)
	}
	if n := e.missing(); n != 0 {
		t.Fatalf("offset_missing_total = %v before Redis lost anything", n)
	}
	e.lose()
	if err := e.sink.Apply(ctx, e.batch(4)); err != nil {
		t.Fatal(err)
	}
	if n := e.missing(); n != 1 {
		t.Fatalf("offset_missing_total = %v after Redis lost the slot, want 1", n)
	}
	if next, ok, err := e.sink.Resume(ctx, "t", 0); err != nil || !ok || next != 6 {
		t.Fatalf("Resume = %d, %v, %v; want 6", next, ok, err)
	}
}

// The same with write-back: the loss shows at the next checkpoint (refused:
// the slot holds no checkpoint), and the batch after it, which finds no
// offset at all, is reported as lost data, not taken for a new partition.
func TestWriteBackSinkReportsAnOffsetRedisLost(t *testing.T) {
	e := newLossEnv(t, true)
	ctx := context.Background()
	next := int64(0)
	apply := func() error {
		b := e.batch(next)
		err := e.sink.Apply(ctx, b)
		var rw *aggregator.RewindError
		switch {
		case errors.As(err, &rw):
			next = rw.Next
		case err == nil:
			next = b.Last + 1
		}
		return err
	}
	for range 2 { // the partition's first batch has no offset yet: nothing lost
		if err := apply(); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.missing(); n != 0 {
		t.Fatalf("offset_missing_total = %v before Redis lost anything", n)
	}
	e.lose()
	e.now = e.now.Add(3 * time.Second) // a checkpoint is due after the next batch: refused
	for range 3 {
		_ = apply() // the batch after the refusal rewinds, then is applied
	}
	if n := e.missing(); n != 1 {
		t.Fatalf("offset_missing_total = %v after Redis lost the slot, want 1", n)
	}
}
