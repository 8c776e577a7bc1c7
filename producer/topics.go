package producer

import (
	"context"

	"github.com/floodgate-dev/floodgate/internal/topics"
)

// TopicSpec describes a topic for EnsureTopics.
type TopicSpec = topics.Spec

// EnsureTopics creates the missing topics of specs, treating "already
// exists" as success, and waits until they have leaders (what `floodgate
// topics` does, for a program that creates its own).
func EnsureTopics(ctx context.Context, brokers []string, specs ...TopicSpec) error {
	_, err := topics.Ensure(ctx, brokers, specs...)
	return err
}

// Partition is the partition of numPartitions that a message keyed key
// lands in: Java's default partitioner (murmur2), which the Publisher uses,
// so a program can tell which aggregator owns a subject.
func Partition(key []byte, numPartitions int) int { return topics.Partition(key, numPartitions) }
