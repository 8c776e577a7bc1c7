package aggregator

import (
	"context"

	"floodgate/event"
)

// Record is one accepted event and where it came from.
type Record struct {
	Offset int64
	Event  event.Event
	// Counted marks events the limiter's strict mode already counted in Redis
	// (Kafka header event.HeaderCounted). Live sinks skip them; history sinks
	// count them like any other.
	Counted bool
}

// Batch is a run of consecutive offsets [First, Last] of one partition. Every
// offset in the run is covered, including messages that were dead-lettered or
// skipped and so have no Record, and offsets the log holds no message for
// (transaction markers, compacted or deleted records): applying the batch
// advances the partition to Last+1 whatever Records holds, and each batch of
// a worker starts where the previous one ended.
type Batch struct {
	Topic     string
	Partition int
	First     int64
	Last      int64
	Records   []Record
}

// Next is the offset a partition resumes from once the batch is applied.
func (b Batch) Next() int64 { return b.Last + 1 }

// Sink applies batches with exactly-once effect. Implementations store the
// partition's next offset in the same atomic write as the batch and must treat
// a batch whose offsets they already hold as a no-op, so redelivery after a
// crash or rebalance, and a stale owner racing the new one, change nothing.
type Sink interface {
	// Resume returns the offset to read next for the partition, from the
	// sink's own store. ok is false when the sink has never applied a batch of
	// that partition.
	Resume(ctx context.Context, topic string, partition int) (next int64, ok bool, err error)
	// Apply makes the batch's effect and its offset durable together.
	Apply(ctx context.Context, b Batch) error
}

// PartitionRunner is implemented by sinks that run work beside each
// partition they are assigned (the live sink relays its decisions). The
// runner's context ends once the partition's last batch is applied; the
// worker waits for RunPartition to return.
type PartitionRunner interface {
	RunPartition(ctx context.Context, topic string, partition int)
}

// OffsetResetter is implemented by sinks that can move a partition's stored
// offset back, from from to to, when the topic was deleted and recreated
// and the stored offset lies beyond the new log's end. It must change
// nothing unless the stored offset is from.
type OffsetResetter interface {
	ResetOffset(ctx context.Context, topic string, partition int, from, to int64) error
}

// TrimBatch returns b from offset from on: the records at or after it, with
// First = from. Sinks call it when their stored offset lies inside a batch
// (a stale owner's batch overlapping the new owner's): only that tail is
// new.
func TrimBatch(b Batch, from int64) Batch {
	kept := make([]Record, 0, len(b.Records))
	for _, r := range b.Records {
		if r.Offset >= from {
			kept = append(kept, r)
		}
	}
	b.First, b.Records = from, kept
	return b
}
