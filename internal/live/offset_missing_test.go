package live_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// lossEnv is a sink over one partition of its own key prefix, on a clock
// the test moves, and the count of losses it reported.
type lossEnv struct {
	t         *testing.T
	rdb       *redis.Client
	prefix    string
	writeBack bool
	st        *window.Store
	set       *rules.Set
	sink      *live.Sink
	reg       *prometheus.Registry
	now       time.Time
}

func newLossEnv(t *testing.T, writeBack bool) *lossEnv {
	e := &lossEnv{t: t, rdb: stacktest.Redis(t), writeBack: writeBack, now: time.Now()}
	e.prefix = stacktest.Prefix(t, e.rdb)
	var err error
	e.st, err = window.NewStore(e.rdb, window.StoreConfig{Prefix: e.prefix, Partitions: func() int { return 1 }})
	if err != nil {
		t.Fatal(err)
	}
	e.set, err = rules.Parse([]byte("rules:\n  - name: r\n    action: a\n    kinds: [ip]\n    limits: [100/1h]\n"))
	if err != nil {
		t.Fatal(err)
	}
	e.newSink()
	return e
}

// newSink replaces the sink with a new one over the same keys: another
// owner of the partition.
func (e *lossEnv) newSink() {
	ap, err := live.NewApplier(e.st, live.ApplierConfig{WriteBack: e.writeBack})
	if err != nil {
		e.t.Fatal(err)
	}
	e.reg = prometheus.NewRegistry()
	e.sink, err = live.NewSink(live.SinkConfig{Applier: ap, Group: "g", Rules: func() *rules.Set { return e.set },
		Registerer: e.reg, Now: func() time.Time { return e.now }})
	if err != nil {
		e.t.Fatal(err)
	}
}

// batch is two events of one subject from offset first, the second one
// counted by the limiter already (event.HeaderCounted).
func (e *lossEnv) batch(first int64) consume.Batch {
	b := consume.Batch{Topic: "t", First: first, Last: first + 1}
	for o := first; o <= first+1; o++ {
		b.Records = append(b.Records, consume.Record{Offset: o, Counted: o > first,
			Event: event.Event{V: 1, ID: event.NewID(), Action: "a", Kind: "ip", Subject: "192.0.2.1", TS: e.now, N: 1}})
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

// counted is the subject's count in Redis's hour window.
func (e *lossEnv) counted() int64 {
	q := []window.EvalQuery{{Subject: window.Subject{Action: "a", Kind: "ip", Subject: "192.0.2.1"}, MaxWindow: time.Hour,
		Limits: []window.EvalLimit{{Limit: rules.Limit{Count: 100, Window: time.Hour}}}}}
	es, err := e.st.Evaluate(context.Background(), e.now, q, 1)
	if err != nil {
		e.t.Fatal(err)
	}
	return es[0].Sums[0]
}

// Redis losing the slot of a partition the sink had stored an offset for
// (a restart without persistence, a flush) is not taken for a new
// partition: the batch that finds it gone is refused with a recount
// (floodgate_live_offset_missing_total), and the group reads the partition
// again from where the longest window begins. The recount counts every
// event up to the partition's end when the loss was found, the limiter's
// counted ones too (their counts were in the slot lost), and goes on
// under an owner that takes the partition over mid-recount.
func TestSinkRecountsASlotRedisLost(t *testing.T) {
	for _, writeBack := range []bool{false, true} {
		t.Run(map[bool]string{false: "write-through", true: "write-back"}[writeBack], func(t *testing.T) {
			e := newLossEnv(t, writeBack)
			ctx := context.Background()
			const end = 8 // the partition's end when the loss is found
			next, lost, recounts, moved := int64(0), false, 0, false
			for next < end+4 {
				if next == 4 && !lost {
					e.lose()
					lost = true
					e.now = e.now.Add(3 * time.Second) // write-back: a checkpoint is due, and refused
				}
				if next == 4 && recounts == 1 && !moved {
					// another owner from the recount's checkpoint at 4
					moved = true
					e.newSink()
					n, ok, err := e.sink.Resume(ctx, "t", 0)
					if err != nil || !ok || n != 4 {
						t.Fatalf("the new owner resumes at %d, %v, %v; want 4", n, ok, err)
					}
				}
				if next == 2 && recounts == 1 {
					e.now = e.now.Add(3 * time.Second) // the recount checkpoints at 4
				}
				select {
				case <-e.sink.Rereads(0): // as the group does
					if n, ok, err := e.sink.Resume(ctx, "t", 0); err == nil && ok {
						next = n
					}
				default:
				}
				b := e.batch(next)
				err := e.sink.Apply(ctx, b)
				var rw *consume.RewindError
				switch {
				case errors.As(err, &rw) && rw.Recount:
					recounts++
					if n := e.missing(); n != 1 {
						t.Fatalf("offset_missing_total = %v after Redis lost the slot, want 1", n)
					}
					if err := e.sink.Recount(ctx, "t", 0, 0, end); err != nil {
						t.Fatal(err)
					}
					next = 0
				case errors.As(err, &rw):
					next = rw.Next
				case err != nil:
					t.Fatal(err)
				default:
					next = b.Last + 1
				}
			}
			if recounts != 1 {
				t.Fatalf("%d recounts, want 1", recounts)
			}
			e.now = e.now.Add(3 * time.Second) // write-back: the last batch checkpoints
			if err := e.sink.Apply(ctx, e.batch(next)); err != nil {
				t.Fatal(err)
			}
			// 0..7 whole, then the uncounted half of 8..13
			if got := e.counted(); got != end+3 {
				t.Fatalf("counted %d after the recount, want %d", got, end+3)
			}
		})
	}
}
