package live_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"floodgate/event"
	"floodgate/live"
	"floodgate/rules"
	"floodgate/stacktest"
	"floodgate/window"
)

// takeOwner is one member answering owner takes of partition 0.
type takeOwner struct {
	t    *testing.T
	sink *live.Sink
	n    int
}

func newTakeOwner(t *testing.T, rdb *redis.Client, st *window.Store, set *rules.Set) *takeOwner {
	t.Helper()
	ap, err := live.NewApplier(st, live.ApplierConfig{WriteBack: true, OwnerTakes: true})
	if err != nil {
		t.Fatal(err)
	}
	// the relay never runs: the test calls no RunPartition
	relay, err := live.NewTakeRelay(live.TakeRelayConfig{Store: st, Redis: rdb, Kafka: &kafka.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := live.NewSink(live.SinkConfig{Applier: ap, Group: "g", Rules: func() *rules.Set { return set },
		CheckpointEvery: time.Hour, TakeRelay: relay,
		Takes: &live.TakesConfig{Redis: rdb, Bounds: func(context.Context, string, int) (int64, int64, error) {
			return 0, 0, nil // nothing in the log: a resumed owner answers at once
		}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sink.RunTakes(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if _, _, err := sink.Resume(context.Background(), "ft", 0); err != nil {
		t.Fatal(err)
	}
	return &takeOwner{t: t, sink: sink}
}

// take takes one of subject against a limit of 3 an hour.
func (o *takeOwner) take(subject string) (bool, error) {
	o.t.Helper()
	o.n++
	now := time.Now()
	e := event.Event{ID: o.t.Name() + strconv.Itoa(o.n) + strconv.FormatInt(now.UnixNano(), 36), Action: "reset", Kind: "email", Subject: subject, N: 1, TS: now}
	v, err := event.Encode(e)
	if err != nil {
		o.t.Fatal(err)
	}
	q := window.EvalQuery{Subject: window.Subject{Action: "reset", Kind: "email", Subject: subject}, MaxWindow: time.Hour, Count: true,
		Limits: []window.EvalLimit{{Limit: rules.Limit{Count: 3, Window: time.Hour}, Block: true}}}
	taken, _, _, err := o.sink.TakeQueued(context.Background(), now, []window.EvalQuery{q}, 1, []window.QueuedEvent{{Key: []byte(e.Key()), Value: v, ID: e.ID}})
	return taken, err
}

// A member cut off from the group but not from Redis still believes it
// owns its partitions: a take it admits from its memory must not be
// answered once a new owner has loaded the take stream, or the two would
// admit the same room twice. The new owner's load fences the stream; the
// zombie's append fails, so does its take, and it answers no more.
func TestOwnerTakesZombieIsFenced(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, `
rules:
  - name: r
    action: reset
    kinds: [email]
    limits: [3/h]
    strict: true
`)
	const sub = "z@example.com"
	zombie := newTakeOwner(t, rdb, st, set)
	if ok, err := zombie.take(sub); !ok || err != nil {
		t.Fatalf("the first owner's take: taken %v, %v", ok, err)
	}
	next := newTakeOwner(t, rdb, st, set)
	for i := range 2 {
		if ok, err := next.take(sub); !ok || err != nil {
			t.Fatalf("the new owner's take %d: taken %v, %v", i+1, ok, err)
		}
	}
	if ok, err := next.take(sub); ok || err != nil {
		t.Fatalf("the new owner's fourth take: taken %v, %v; want refused (its predecessor's take counts)", ok, err)
	}
	// the zombie's memory holds 1 of 3
	ok, err := zombie.take(sub)
	if ok || !errors.Is(err, live.ErrNotOwner) {
		t.Fatalf("the zombie's take: taken %v, %v; want failed, not the owner", ok, err)
	}
	if ok, err := zombie.take(sub); ok || !errors.Is(err, live.ErrNotOwner) {
		t.Fatalf("the zombie's next take: taken %v, %v; want failed, not the owner", ok, err)
	}
	if n, err := rdb.XLen(context.Background(), st.Keys().Takes(0)).Result(); err != nil || n != 3 {
		t.Errorf("the take stream holds %d entries (%v), want the 3 admitted", n, err)
	}
}
