package live

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"floodgate/event"
	"floodgate/rules"
	"floodgate/stacktest"
	"floodgate/window"
	"floodgate/window/windowtest"
)

// lossOwner is a sink answering owner takes of partition 0, its ticks run
// by the test.
type lossOwner struct {
	t    *testing.T
	s    *Sink
	rdb  *redis.Client
	key  string
	took []string // the events of the takes it admitted
}

func newLossOwner(t *testing.T) *lossOwner {
	rdb := stacktest.Redis(t)
	st := windowtest.NewStore(t, rdb)
	set := windowtest.MustRules(t, `
rules:
  - name: r
    action: reset
    kinds: [email]
    limits: [100/h]
    strict: true
`)
	ap, err := NewApplier(st, ApplierConfig{WriteBack: true, OwnerTakes: true})
	if err != nil {
		t.Fatal(err)
	}
	// never run (no RunPartition): its produce timeout is the wait for
	// requests sent before a loss
	relay, err := NewTakeRelay(TakeRelayConfig{Store: st, Redis: rdb, Kafka: &kafka.Client{}, ProduceTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSink(SinkConfig{Applier: ap, Group: "g", Rules: func() *rules.Set { return set }, CheckpointEvery: time.Hour, TakeRelay: relay,
		Takes: &TakesConfig{Redis: rdb, Bounds: func(context.Context, string, int) (int64, int64, error) { return 0, 0, nil }}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.RunTakes(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if _, _, err := s.Resume(context.Background(), "lt", 0); err != nil {
		t.Fatal(err)
	}
	return &lossOwner{t: t, s: s, rdb: rdb, key: st.Keys().Takes(0)}
}

func (o *lossOwner) take() bool {
	o.t.Helper()
	now := time.Now()
	e := event.Event{ID: "e" + strconv.Itoa(len(o.took)+1) + "-" + strconv.FormatInt(now.UnixNano(), 36), Action: "reset", Kind: "email", Subject: "l@example.com", N: 1, TS: now}
	v, err := event.Encode(e)
	if err != nil {
		o.t.Fatal(err)
	}
	q := window.EvalQuery{Subject: window.Subject{Action: "reset", Kind: "email", Subject: e.Subject}, MaxWindow: time.Hour, Count: true,
		Limits: []window.EvalLimit{{Limit: rules.Limit{Count: 100, Window: time.Hour}, Block: true}}}
	taken, _, _, err := o.s.TakeQueued(context.Background(), now, []window.EvalQuery{q}, 1, []window.QueuedEvent{{Key: []byte(e.Key()), Value: v, ID: e.ID}})
	if taken && err == nil {
		o.took = append(o.took, e.ID)
	}
	return taken && err == nil
}

// lose makes the stream what a replica that lacks its last entry holds:
// the entries before it, its last id the one before.
func (o *lossOwner) lose() {
	o.t.Helper()
	ctx := context.Background()
	msgs, err := o.rdb.XRange(ctx, o.key, "-", "+").Result()
	if err != nil || len(msgs) == 0 {
		o.t.Fatalf("take stream: %d entries, %v", len(msgs), err)
	}
	pipe := o.rdb.TxPipeline()
	pipe.Del(ctx, o.key)
	for _, m := range msgs[:len(msgs)-1] {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: o.key, ID: m.ID, Values: m.Values})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		o.t.Fatal(err)
	}
}

// streamEvents are the ids of the events the take stream holds.
func (o *lossOwner) streamEvents() map[string]int {
	o.t.Helper()
	msgs, err := o.rdb.XRange(context.Background(), o.key, "-", "+").Result()
	if err != nil {
		o.t.Fatal(err)
	}
	ids := map[string]int{}
	for _, m := range msgs {
		for _, v := range m.Values {
			_, value, err := window.ParseQueuedEvent(v.(string))
			if err != nil {
				o.t.Fatal(err)
			}
			e, err := event.Decode(value)
			if err != nil {
				o.t.Fatal(err)
			}
			ids[e.ID]++
		}
	}
	return ids
}

// recovered runs the partition's ticks until its takes are answered again.
func (o *lossOwner) recovered() {
	o.t.Helper()
	p := o.s.part(0)
	stacktest.WaitFor(o.t, "the lost entry appended again and the takes open", 10*time.Second, func() bool {
		o.s.reopenTakes(context.Background(), "lt", 0, p)
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.takes.open
	})
}

// A Redis failover to a replica that lacks the owner's last appends loses
// take entries it acknowledged: the owner notices (on its stream check, or
// on an append whose id is not past the last), closes the partition's
// takes, and appends the lost entries again once nothing else can count
// them; every take it admitted is then in the stream exactly once.
func TestOwnerTakesAppendLostEntriesAgain(t *testing.T) {
	o := newLossOwner(t)
	for range 2 {
		if !o.take() {
			t.Fatal("a take failed")
		}
	}
	// found by the stream check: nothing is appended meanwhile
	o.lose()
	stacktest.WaitFor(t, "the loss noticed", 10*time.Second, func() bool {
		p := o.s.part(0)
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.takes.lostAt.IsZero() && !p.takes.open
	})
	if o.take() {
		t.Fatal("a take was answered while the lost entry is missing")
	}
	o.recovered()
	if !o.take() {
		t.Fatal("a take failed after the recovery")
	}
	// found by the next append: its id is not past the last acknowledged
	o.lose()
	if !o.take() {
		t.Fatal("the take that finds the loss failed; want it appended")
	}
	o.recovered()
	got := o.streamEvents()
	for _, id := range o.took {
		if got[id] != 1 {
			t.Errorf("event %s is in the take stream %d times, want once", id, got[id])
		}
	}
	if len(got) != len(o.took) {
		t.Errorf("the stream holds %d events, the takes admitted %d", len(got), len(o.took))
	}
	if n := testutil.ToFloat64(o.s.m.takesLost.WithLabelValues("appended_again")); n != 2 {
		t.Errorf("entries appended again: %v, want 2", n)
	}
}
