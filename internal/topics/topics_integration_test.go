package topics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/topics"

	"github.com/segmentio/kafka-go"
)

func TestEnsureIdempotent(t *testing.T) {
	brokers := stacktest.Brokers(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("floodgate.test.topics.%d", time.Now().UnixNano())
	specs := []topics.Spec{
		{Name: prefix + ".a", Partitions: 4},
		{Name: prefix + ".b", Partitions: 1, Configs: map[string]string{"retention.ms": "3600000"}},
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := topics.Delete(ctx, brokers, prefix+".a", prefix+".b"); err != nil {
			t.Errorf("delete test topics: %v", err)
		}
	})

	res, err := topics.Ensure(ctx, brokers, specs...)
	if err != nil {
		t.Fatalf("first Ensure: %v", err)
	}
	for i, r := range res {
		if !r.Created || r.Partitions != specs[i].Partitions {
			t.Errorf("first Ensure %s = %+v, want created with %d partitions", specs[i].Name, r, specs[i].Partitions)
		}
	}

	// Again, with a different partition count: exists, left as it is.
	specs[0].Partitions = 8
	res, err = topics.Ensure(ctx, brokers, specs...)
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	if r := res[0]; r.Created || r.Partitions != 4 || r.Wanted != 8 || !strings.Contains(r.String(), "exists, 4 partitions (spec: 8)") {
		t.Errorf("second Ensure = %+v (%s)", r, r)
	}

	parts, err := topics.Partitions(ctx, brokers, prefix+".a", prefix+".b")
	if err != nil || parts[prefix+".a"] != 4 || parts[prefix+".b"] != 1 {
		t.Errorf("Partitions = %v, %v", parts, err)
	}
}

func TestEnsureRejectsBadSpec(t *testing.T) {
	tests := []topics.Spec{
		{Name: "", Partitions: 1},
		{Name: "a b", Partitions: 1},
		{Name: "ok", Partitions: 0},
		{Name: "..", Partitions: 1},
		{Name: "ok", Partitions: 1, ReplicationFactor: -2},
	}
	for _, s := range tests {
		t.Run(s.Name, func(t *testing.T) {
			// No broker is contacted: validation comes first.
			if _, err := topics.Ensure(t.Context(), []string{"127.0.0.1:1"}, s); err == nil {
				t.Errorf("Ensure(%+v) accepted an invalid spec", s)
			}
		})
	}
}

// TestDeleteRecords moves a partition's log start as retention would:
// the broker answers with the new start, reading below it is out of range,
// and the other partition is untouched.
func TestDeleteRecords(t *testing.T) {
	brokers := stacktest.Brokers(t)
	topic := stacktest.Topic(t, brokers, 2)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.RoundRobin{}, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	for i := range 20 {
		if err := w.WriteMessages(ctx, kafka.Message{Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	starts, err := topics.DeleteRecords(ctx, brokers, topic, map[int]int64{0: 6})
	if err != nil {
		t.Fatal(err)
	}
	if starts[0] != 6 {
		t.Fatalf("log start after delete = %v, want 6", starts)
	}
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
		topic: {kafka.FirstOffsetOf(0), kafka.FirstOffsetOf(1)}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Topics[topic] {
		if want := map[int]int64{0: 6, 1: 0}[p.Partition]; p.FirstOffset != want {
			t.Errorf("partition %d starts at %d, want %d", p.Partition, p.FirstOffset, want)
		}
	}
	f, err := client.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: 0, Offset: 2, MaxBytes: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(f.Error, kafka.OffsetOutOfRange) {
		t.Errorf("fetch below the new start: %v, want offset out of range", f.Error)
	}
}

// TestDefaultsBoundEventBatches creates floodgate's topics from Defaults
// and reads back the events topic's max.message.bytes: the broker refuses a
// batch larger than the contract's, whatever its own default.
func TestDefaultsBoundEventBatches(t *testing.T) {
	brokers := stacktest.Brokers(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("floodgate.test.topics.%d", time.Now().UnixNano())
	specs := topics.Defaults(prefix+".events", prefix+".dlq", prefix+".decisions")
	for i := range specs {
		specs[i].Partitions = 1
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := topics.Delete(ctx, brokers, prefix+".events", prefix+".dlq", prefix+".decisions"); err != nil {
			t.Errorf("delete test topics: %v", err)
		}
	})
	if _, err := topics.Ensure(ctx, brokers, specs...); err != nil {
		t.Fatal(err)
	}
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	res, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: prefix + ".events", ConfigNames: []string{"max.message.bytes"}}}})
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, r := range res.Resources {
		for _, e := range r.ConfigEntries {
			if e.ConfigName == "max.message.bytes" {
				got = e.ConfigValue
			}
		}
	}
	if want := fmt.Sprint(topics.EventsMaxMessageBytes); got != want {
		t.Fatalf("events topic max.message.bytes = %q, want %s", got, want)
	}

	// A batch past it is refused by the broker.
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: prefix + ".events", RequiredAcks: kafka.RequireAll, BatchBytes: 4 << 20}
	defer w.Close()
	// A topic created moments ago may not be in the writer's metadata yet.
	stacktest.WaitFor(t, "the broker answering for the new topic", 30*time.Second, func() bool {
		err = w.WriteMessages(ctx, kafka.Message{Value: make([]byte, topics.EventsMaxMessageBytes+1)})
		var we kafka.WriteErrors
		return !(errors.As(err, &we) && len(we) == 1 && errors.Is(we[0], kafka.UnknownTopicOrPartition)) && !errors.Is(err, kafka.UnknownTopicOrPartition)
	})
	var we kafka.WriteErrors
	if !errors.As(err, &we) || len(we) != 1 || !errors.Is(we[0], kafka.MessageSizeTooLarge) {
		t.Errorf("write of a %d-byte batch: %v, want %v", topics.EventsMaxMessageBytes+1, err, kafka.MessageSizeTooLarge)
	}
}
