package live_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// holdPart holds the first checkpoint part script it sees, once armed,
// until released.
type holdPart struct {
	marks   string
	armed   chan struct{}
	reached chan struct{}
	release chan struct{}
}

func (h *holdPart) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdPart) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *holdPart) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		select {
		case <-h.armed:
			if slices.Contains(cmd.Args(), any(h.marks)) {
				select {
				case <-h.reached:
				default:
					close(h.reached)
					<-h.release
				}
			}
		default:
		}
		return next(ctx, cmd)
	}
}

// A periodic checkpoint in parts that the partition's stop overtakes
// (a revoke, a shutdown) finishes its parts, and the final checkpoint
// writes C: the next owner replays nothing. Cut between its parts, it
// dropped the memory, and C stayed where it was.
func TestCheckpointInPartsFinishesAcrossTheStop(t *testing.T) {
	ctx := context.Background()
	rdb := stacktest.Redis(t)
	hooked := redis.NewClient(rdb.Options())
	t.Cleanup(func() { _ = hooked.Close() })
	store := newStore(t, hooked)
	h := &holdPart{marks: store.Keys().CheckpointMarks("g", "t", 0), armed: make(chan struct{}), reached: make(chan struct{}), release: make(chan struct{})}
	hooked.AddHook(h)
	set := mustRules(t, actPerDay)
	ap, err := live.NewApplier(store, live.ApplierConfig{WriteBack: true, CheckpointPart: 2})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := live.NewSink(live.SinkConfig{Applier: ap, Group: "g", Rules: func() *rules.Set { return set }, CheckpointEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := sink.Resume(ctx, "t", 0); err != nil {
		t.Fatal(err)
	}
	evs := make([]eventT, 20)
	for i := range evs {
		evs[i] = ev("act", "k", fmt.Sprintf("10.0.0.%d", i), time.Now())
	}
	b := (&batcher{Topic: "t"}).Batch(evs...)
	if err := sink.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}
	close(h.armed)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sink.RunPartition(rctx, "t", 0)
	}()
	select {
	case <-h.reached:
	case <-time.After(10 * time.Second):
		t.Fatal("no checkpoint in parts")
	}
	cancel() // the partition stops while the checkpoint holds its first part
	close(h.release)
	<-done
	c, err := rdb.Get(ctx, store.Keys().Checkpoint("g", "t", 0)).Int64()
	if err != nil || c != b.Last+1 {
		t.Fatalf("C after the stop: %d (%v), want %d: the memory was dropped and the next owner replays it", c, err, b.Last+1)
	}
}
