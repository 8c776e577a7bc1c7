package producer

import (
	"context"

	"github.com/floodgate-dev/floodgate/internal/topics"
)

// TopicSpec describes a topic for EnsureTopics.
type TopicSpec = topics.Spec

// EnsureTopics creates the missing topics of specs, treating "already
// exists" as success, and waits until they have leaders. It forwards to
// topics.Ensure, which also reports what it did.
func EnsureTopics(ctx context.Context, brokers []string, specs ...TopicSpec) error {
	_, err := topics.Ensure(ctx, brokers, specs...)
	return err
}
