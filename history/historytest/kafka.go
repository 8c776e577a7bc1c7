package historytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"floodgate/producer"
)

// Brokers returns FLOODGATE_BROKERS or the stack's broker, failing when
// Kafka does not answer (skipping under -short).
func Brokers(tb testing.TB) []string {
	tb.Helper()
	brokers := []string{"127.0.0.1:19092"}
	if v := os.Getenv("FLOODGATE_BROKERS"); v != "" {
		brokers = strings.Split(v, ",")
	}
	if testing.Short() {
		tb.Skip("integration test: needs Kafka (scripts/stack up)")
	}
	conn, err := net.DialTimeout("tcp", brokers[0], 3*time.Second)
	if err != nil {
		tb.Fatalf("Kafka unreachable at %s (scripts/stack up, or set FLOODGATE_BROKERS): %v", brokers[0], err)
	}
	_ = conn.Close()
	return brokers
}

// Topic creates a fresh topic with the given partitions.
func Topic(tb testing.TB, brokers []string, partitions int) string {
	tb.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "fgtest.history." + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := producer.EnsureTopics(ctx, brokers, producer.TopicSpec{Name: name, Partitions: partitions}); err != nil {
		tb.Fatalf("create topic %s: %v", name, err)
	}
	return name
}
