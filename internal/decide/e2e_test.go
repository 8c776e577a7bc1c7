package decide_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/strict"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/producer"
)

// The whole live path: events produced to Kafka, counted by the aggregator
// (consumer group + window sink) into Redis, make the limiter deny over
// HTTP; strict takes published by the limiter with the counted header are
// not counted a second time by the aggregator.
func TestEndToEndThroughKafkaAndAggregator(t *testing.T) {
	rdb := liveRedis(t)
	// The topic has 2 partitions: the store finds slots with that count, as
	// the aggregator and the limiter do with the topic's.
	store, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: func() int { return 2 }})
	if err != nil {
		t.Fatal(err)
	}
	set := mustRules(t, testRules)
	bs := stacktest.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	topic := stacktest.Topic(t, bs, 2)
	kc := &kafka.Client{Addr: kafka.TCP(bs...), Timeout: 10 * time.Second}

	ap, err := live.NewApplier(store, live.ApplierConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := live.NewSink(live.SinkConfig{Applier: ap, Group: "e2e", Rules: func() *rules.Set { return set }})
	if err != nil {
		t.Fatal(err)
	}
	group, err := consume.NewGroup(consume.Config{Brokers: bs, Topic: topic, GroupID: "test-limiter-" + topic}, sink)
	if err != nil {
		t.Fatal(err)
	}
	gctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- group.Run(gctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("aggregator: %v", err)
		}
	}()

	pub, err := producer.New(producer.Config{Brokers: bs, Topic: topic, BatchTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pub.Close(); err != nil {
			t.Error(err)
		}
	}()
	taker, err := strict.New(strict.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	state := decide.NewState()
	two := func() int { return 2 }
	go func() {
		_ = decide.Sync(ctx, decide.SyncConfig{State: state, Source: store, Streams: rdb, Partitions: two})
	}()
	lim, err := decide.New(decide.Config{Store: store, Taker: taker, State: state, Partitions: two,
		Rules: func() *rules.Set { return set }, Publisher: pub, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the limiter to load its state", func() bool { return lim.Ready(ctx) == nil })
	srv, err := decide.NewServer(decide.ServerConfig{Limiter: lim, HTTPAddr: "127.0.0.1:0", RLSAddr: "off"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()

	// Strict takes first: published with the counted header.
	for i := range 3 {
		d, err := lim.Take(ctx, decide.Request{Action: "password_reset", Subjects: []decide.Subject{{Kind: "email", Subject: "e2e@example.com"}}})
		if err != nil || !d.Allowed || !d.Counted {
			t.Fatalf("take %d: %+v %v", i, d, err)
		}
	}
	// Then a login attack from one IP, produced like any application would.
	now := time.Now()
	var evs []event.Event
	for range 6 {
		evs = append(evs, event.Event{ID: event.NewID(), Action: "login_failed", Kind: "ip", Subject: "203.0.113.99", TS: now})
	}
	if err := pub.Publish(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	url := "http://" + srv.HTTPAddr() + "/v1/check?action=login_failed&ip=203.0.113.99"
	var last int
	for ctx.Err() == nil {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		last = resp.StatusCode
		if last == http.StatusTooManyRequests {
			if resp.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last != http.StatusTooManyRequests {
		t.Fatalf("never denied: last status %d", last)
	}
	// Wait until the aggregator has applied every message of the topic,
	// the counted ones included: the strict subject's count is still 3.
	lo, err := kc.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(0), kafka.LastOffsetOf(1)}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, po := range lo.Topics[topic] {
		if po.Error != nil {
			t.Fatal(po.Error)
		}
		for {
			next, ok, err := sink.Resume(ctx, topic, po.Partition)
			if err != nil {
				t.Fatal(err)
			}
			if po.LastOffset == 0 || (ok && next >= po.LastOffset) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("partition %d: aggregator at %d, end %d", po.Partition, next, po.LastOffset)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	d, err := lim.Check(ctx, decide.Request{Action: "password_reset", Exact: true, Subjects: []decide.Subject{{Kind: "email", Subject: "e2e@example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Limits) == 0 || d.Limits[0].Count != 3 {
		t.Fatalf("strict subject after the aggregator: %+v, want count 3 (counted once)", d.Limits)
	}
}
