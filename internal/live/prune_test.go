package live_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// A partition that receives no batch any more still sheds its expired
// states: the sink prunes the partitions it owns on a timer.
func TestSinkPrunesAnIdlePartition(t *testing.T) {
	ctx := context.Background()
	rdb := stacktest.Redis(t)
	store, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: func() int { return 1 }})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse([]byte("rules:\n  - name: probe-hourly\n    action: probe\n    kinds: [ip]\n    limits: [2/1h]\n"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Truncate(time.Second)
	clock := start
	ap, err := live.NewApplier(store, live.ApplierConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := live.NewSink(live.SinkConfig{Applier: ap, Group: "g", Rules: func() *rules.Set { return set }, PruneEvery: 20 * time.Millisecond, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	b := consume.Batch{Topic: "t", Partition: 0}
	for i := range 700 {
		b.Records = append(b.Records, consume.Record{Offset: int64(i), Event: event.Event{V: 1, ID: event.NewID(), Action: "probe", Kind: "ip", Subject: fmt.Sprintf("2001:db8:%x::1", i), TS: start, N: 1}})
	}
	b.Last = int64(len(b.Records) - 1)
	if err := sink.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	if n := rdb.HLen(ctx, store.Keys().State(0)).Val(); n != 700 {
		t.Fatalf("state hash holds %d, want 700", n)
	}
	// the clock passes every state's end before the partition runs: no
	// goroutine reads it while it changes
	clock = start.Add(time.Hour + time.Second)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sink.RunPartition(rctx, "t", 0)
	}()
	stacktest.WaitFor(t, "the idle partition's states to be pruned", 10*time.Second, func() bool {
		return rdb.HLen(ctx, store.Keys().State(0)).Val() == 0
	})
	cancel()
	<-done
}
