package live_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// flaky fails its first failures writes; when lying, it writes to Kafka and
// still reports a failure (an ack lost on the way back).
type flaky struct {
	w        *kafka.Writer
	failures atomic.Int64
	lying    bool
}

func (f *flaky) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	if f.failures.Add(-1) >= 0 {
		if f.lying {
			if err := f.w.WriteMessages(ctx, msgs...); err != nil {
				return err
			}
		}
		return errors.New("injected publish failure")
	}
	return f.w.WriteMessages(ctx, msgs...)
}

// decisionIDs reads n decisions from the topic and counts each id.
func decisionIDs(t *testing.T, brokers []string, topic string, n int) map[string]int {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := map[string]int{}
	for range n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read decisions (%d so far): %v", len(ids), err)
		}
		var d window.DecisionMessage
		if err := json.Unmarshal(m.Value, &d); err != nil {
			t.Fatal(err)
		}
		if d.ID == "" || string(m.Key) != d.Kind+":"+d.Subject {
			t.Fatalf("decision %s (key %s) without an id or keyed wrong", m.Value, m.Key)
		}
		ids[d.ID]++
	}
	return ids
}

// The relay publishes every decision of the change stream, at least once:
// failed publishes are retried without moving the cursor (nothing lost), an
// ack lost after Kafka took the write publishes again with the same ids
// (recognisable duplicates), and a relay restarted from its cursor neither
// loses nor repeats what the previous one published.
func TestRelayPublishesEveryDecisionAtLeastOnce(t *testing.T) {
	rdb, bs, topic, st, fx := newDenyFixture(t)
	var ips int
	deny := func(n int) {
		t.Helper()
		batch := make([]string, n)
		for i := range batch {
			batch[i] = "192.0.2." + strconv.Itoa(ips)
			ips++
		}
		fx.deny(batch...)
	}
	w := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	run := func(writer live.MessageWriter, until func() bool) {
		t.Helper()
		relay, err := live.NewRelay(live.RelayConfig{Store: st, Redis: rdb, Writer: writer, RetryBackoff: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { relay.Run(ctx, 0); close(done) }()
		deadline := time.Now().Add(20 * time.Second)
		for !until() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		<-done
	}
	cursorSeq := func() int64 {
		v, _ := rdb.Get(context.Background(), st.Keys().Relay(0)).Result()
		for i := range v {
			if v[i] == ' ' {
				n, _ := strconv.ParseInt(v[i+1:], 10, 64)
				return n
			}
		}
		return 0
	}

	// 3 decisions; the first two publishes fail.
	deny(3)
	f := &flaky{w: w}
	f.failures.Store(2)
	run(f, func() bool { return cursorSeq() == 1 })
	// 2 more; the first publish reaches Kafka but reports a failure.
	deny(2)
	f = &flaky{w: w, lying: true}
	f.failures.Store(1)
	run(f, func() bool { return cursorSeq() == 2 })
	// A new relay from the cursor: 4 more, nothing repeated.
	deny(4)
	run(w, func() bool { return cursorSeq() == 3 })

	ids := decisionIDs(t, bs, topic, 3+2+2+4)
	if len(ids) != 9 {
		t.Fatalf("%d distinct decisions published, want 9: %v", len(ids), ids)
	}
	dups := 0
	for _, n := range ids {
		if n > 1 {
			dups += n - 1
		}
	}
	if dups != 2 {
		t.Fatalf("%d duplicates, want the 2 of the lost ack: %v", dups, ids)
	}
}

// failingSet is the real Redis client whose next failures cursor writes
// fail, as a Redis that times out or fails over does.
type failingSet struct {
	*redis.Client
	failures atomic.Int64
}

func (f *failingSet) Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd {
	if f.failures.Add(-1) >= 0 {
		cmd := redis.NewStatusCmd(ctx, "set", key, value)
		cmd.SetErr(errors.New("injected cursor write failure"))
		return cmd
	}
	return f.Client.Set(ctx, key, value, expiration)
}

// A relay whose cursor write fails restarts from its cursor instead of
// stopping the partition's decisions until the next rebalance: decisions
// made after the failure are published, and the restart is counted.
func TestRelayRestartsAfterAFailedRedisWrite(t *testing.T) {
	rdb, bs, topic, st, fx := newDenyFixture(t)
	deny := func(ip string) { fx.deny(ip) }
	w := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	fr := &failingSet{Client: rdb}
	fr.failures.Store(1)
	reg := prometheus.NewRegistry()
	relay, err := live.NewRelay(live.RelayConfig{Store: st, Redis: fr, Writer: w, RetryBackoff: 10 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { relay.Run(ctx, 0); close(done) }()
	defer func() { cancel(); <-done }()

	deny("192.0.2.1") // published, but its cursor write fails
	stacktest.WaitFor(t, "the failed cursor write", 20*time.Second, func() bool { return fr.failures.Load() < 0 })
	deny("192.0.2.2")                   // made after the failure
	ids := decisionIDs(t, bs, topic, 3) // the first twice (its cursor did not move), the second once
	if len(ids) != 2 {
		t.Fatalf("decisions published %v, want both subjects' decisions", ids)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	restarts, running := 0.0, -1.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "floodgate_live_relay_restarts_total":
				restarts += m.GetCounter().GetValue()
			case "floodgate_live_relay_running":
				running = m.GetGauge().GetValue()
			}
		}
	}
	if restarts != 1 || running != 1 {
		t.Errorf("restarts_total %v, running %v; want 1 and 1", restarts, running)
	}
}

// A failover to a replica that lacked the change stream's last entries
// gives their sequence numbers again, to new entries (the batches applied
// again). The relay publishes those as they come, and goes on: counting
// the decisions "lost" by a negative number once stopped the process.
func TestRelayGoesOnWhenTheChangeStreamGoesBack(t *testing.T) {
	rdb, bs, topic, st, fx := newDenyFixture(t)
	deny := fx.deny
	w := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	relay, err := live.NewRelay(live.RelayConfig{Store: st, Redis: rdb, Writer: w, RetryBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { relay.Run(ctx, 0); close(done) }()
	defer func() { cancel(); <-done }()
	// a batch each: change entries 1, 2 and 3
	for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		deny(ip)
	}
	if ids := decisionIDs(t, bs, topic, 3); len(ids) != 3 {
		t.Fatalf("decisions published: %v, want 3", ids)
	}
	// the replica had the first entry only
	if err := rdb.Set(context.Background(), st.Keys().Seq(0), 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	deny("192.0.2.4") // entry 2 again
	deny("192.0.2.5")
	if ids := decisionIDs(t, bs, topic, 5); len(ids) != 5 {
		t.Fatalf("decisions published: %v, want the 3 and the 2 after the stream went back", ids)
	}
}

// denyFixture applies batches that take IPs over a 1/h rule, a batch per
// call, in write-through: each batch one change entry.
type denyFixture struct {
	t    *testing.T
	ap   *live.Applier
	set  *rules.Set
	next int64
}

// newDenyFixture is a one-partition store on the stack's Redis, a topic of
// one partition for decisions, and a denyFixture over them.
func newDenyFixture(t *testing.T) (*redis.Client, []string, string, *window.Store, *denyFixture) {
	t.Helper()
	rdb := stacktest.Redis(t)
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 1)
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: func() int { return 1 }})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := live.NewApplier(st, live.ApplierConfig{})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse([]byte("rules:\n  - name: r\n    action: a\n    kinds: [ip]\n    limits: [1/1h]\n"))
	if err != nil {
		t.Fatal(err)
	}
	return rdb, bs, topic, st, &denyFixture{t: t, ap: ap, set: set}
}

// deny applies one batch of two events for each IP: each denied.
func (f *denyFixture) deny(ips ...string) {
	f.t.Helper()
	now := time.Now()
	b := consume.Batch{Topic: "t", First: f.next}
	for _, ip := range ips {
		for range 2 {
			b.Records = append(b.Records, consume.Record{Offset: f.next, Event: event.Event{V: 1, ID: event.NewID(), Action: "a", Kind: "ip", Subject: ip, TS: now, N: 1}})
			f.next++
		}
	}
	b.Last = f.next - 1
	if _, err := f.ap.Apply(context.Background(), "g", b, f.set, now, nil); err != nil {
		f.t.Fatal(err)
	}
}
