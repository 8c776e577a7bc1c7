package topics_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/topics"
)

// TestAdminCallsOverSASLSSL: create, describe, DeleteRecords and delete on
// the secure profile's broker, whose only listener is SASL_SSL.
func TestAdminCallsOverSASLSSL(t *testing.T) {
	sec := stacktest.Secure(t)
	pw, err := os.ReadFile(sec.KafkaPasswordFile)
	if err != nil {
		t.Fatal(err)
	}
	m, err := scram.Mechanism(scram.SHA256, sec.KafkaUser, strings.TrimSpace(string(pw)))
	if err != nil {
		t.Fatal(err)
	}
	kc := kafkaconn.Cluster{Brokers: sec.Brokers, Security: kafkaconn.Security{TLS: sec.ClientTLS(t), SASL: m}}
	ctx := t.Context()
	topic := fmt.Sprintf("fgtest.secure-admin-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if _, err := topics.EnsureOn(ctx, kc, topics.Spec{Name: topic, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := topics.DeleteOn(ctx, kc, topic); err != nil {
			t.Errorf("delete %s: %v", topic, err)
		}
	})
	if n, err := topics.PartitionsOn(ctx, kc, topic); err != nil || n[topic] != 2 {
		t.Fatalf("partitions %v, %v", n, err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(kc.Brokers...), Topic: topic, Balancer: &kafka.RoundRobin{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, Transport: kc.Transport(nil)}
	defer w.Close()
	for i := range 10 {
		if err := w.WriteMessages(ctx, kafka.Message{Partition: 0, Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	starts, err := topics.DeleteRecordsOn(ctx, kc, topic, map[int]int64{0: 2})
	if err != nil || starts[0] != 2 {
		t.Fatalf("DeleteRecordsOn: %v, %v; want partition 0 to start at 2", starts, err)
	}
}
