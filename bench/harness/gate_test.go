package harness_test

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"floodgate/bench/harness"
	"floodgate/stacktest"
)

// Records produced behind an open gate are past the last stable offset (a
// read_committed consumer stops there) until Release commits.
func TestGateHoldsRecordsBackUntilReleased(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gate, err := harness.OpenGate(ctx, bs, topic, [][]byte{[]byte("gate"), []byte("gate")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := gate.Close(); err != nil {
			t.Error(err)
		}
	}()
	w := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: topic, Balancer: &kafka.RoundRobin{}, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	msgs := make([]kafka.Message, 10)
	for i := range msgs {
		msgs[i] = kafka.Message{Value: []byte("behind the gate")}
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	stable := func() (committed, end int64) {
		t.Helper()
		kc := &kafka.Client{Addr: kafka.TCP(bs...), Timeout: 10 * time.Second}
		for _, iso := range []kafka.IsolationLevel{kafka.ReadCommitted, kafka.ReadUncommitted} {
			resp, err := kc.ListOffsets(ctx, &kafka.ListOffsetsRequest{IsolationLevel: iso,
				Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(0), kafka.LastOffsetOf(1)}}})
			if err != nil {
				t.Fatal(err)
			}
			var sum int64
			for _, po := range resp.Topics[topic] {
				if po.Error != nil {
					t.Fatal(po.Error)
				}
				sum += po.LastOffset
			}
			if iso == kafka.ReadCommitted {
				committed = sum
			} else {
				end = sum
			}
		}
		return committed, end
	}
	if committed, end := stable(); committed != 0 || end != 12 {
		t.Fatalf("gate open: last stable offsets sum to %d (want 0: the gate records), ends to %d (want 12)", committed, end)
	}
	if err := gate.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The coordinator writes the commit markers after answering, each at an
	// offset of its own.
	for {
		committed, end := stable()
		if committed == 14 && end == 14 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("gate released: last stable offsets sum to %d, ends to %d (want 14 each)", committed, end)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}
