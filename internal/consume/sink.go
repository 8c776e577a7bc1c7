package consume

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/event"
)

// Record is one accepted event and where it came from.
type Record struct {
	Offset int64
	Event  event.Event
	// Counted marks events the limiter's strict mode already counted in Redis
	// (Kafka header event.HeaderCounted). Live sinks skip them; history sinks
	// count them like any other.
	Counted bool
	// Take marks events a take relay published from a take stream (Kafka
	// header event.HeaderTake): uncounted, they are an owner's strict
	// takes (stage B), whose in-flight entries the live sink drops as it
	// counts them.
	Take bool
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
	// Apply makes the batch's effect and its offset durable together. A
	// sink whose stored offset lies before the batch returns *RewindError
	// (it lost acknowledged batches): the partition is then read again
	// from there. Apply must not keep b.Records, or a slice of it, once
	// it returns: the group reuses that memory for a later batch (the
	// events' strings and maps are the sink's to keep).
	Apply(ctx context.Context, b Batch) error
}

// PartitionRunner is implemented by sinks that run work beside each
// partition they are assigned (the live sink relays its decisions). The
// runner's context ends once the partition's last batch is applied; the
// worker waits for RunPartition to return.
type PartitionRunner interface {
	RunPartition(ctx context.Context, topic string, partition int)
}

// Rereader is implemented by sinks that can drop what they keep of a
// partition between batches (a write-back checkpoint refused because an
// operator or another writer moved the partition): a reason sent on the
// partition's channel has the partition read again from the sink's Resume
// while it waits for records, rather than at its next batch, which an idle
// partition may not get for long.
type Rereader interface {
	Rereads(partition int) <-chan string
}

// OffsetResetter is implemented by sinks that can move a partition's stored
// offset back, from from to to, when the topic was deleted and recreated
// and the stored offset lies beyond the new log's end. It must change
// nothing unless the stored offset is from.
type OffsetResetter interface {
	ResetOffset(ctx context.Context, topic string, partition int, from, to int64) error
}

// Recounter is implemented by sinks whose store keeps only the recent past
// (the live windows). When that store lost a partition (a Redis restart
// without persistence, a failover before anything was replicated), such a
// sink counts it again from the log, RecountSince back, instead of going
// on without what it lost: its Apply returns a *RewindError with Recount,
// or its Resume finds nothing where the group committed progress.
type Recounter interface {
	// RecountSince is how far back events still count.
	RecountSince() time.Duration
	// Recount tells the sink that the partition is read again from
	// offset from because its store lost it; records before to (the
	// partition's end when the loss was found) were counted in the store
	// lost, whatever their headers say, and are counted again.
	Recount(ctx context.Context, topic string, partition int, from, to int64) error
}

// RewindError is returned by a sink's Apply when the offset it holds for
// the partition lies before the batch: the store lost batches it had
// acknowledged. A Redis primary that dies before replicating its last
// writes does that, and since a partition's offset lives in the same slot
// as its counts, both roll back together to a consistent past. Applying
// the batch anyway would skip what was lost; the runner instead reads the
// partition again from Next, and the lost batches are applied again.
type RewindError struct {
	Topic     string
	Partition int
	Next      int64 // the next offset the sink holds
	First     int64 // the refused batch's first offset
	// Reason, when set, says why a sink that keeps state in memory reads
	// the partition again (another writer fenced it, an operator acted):
	// nothing was lost, its memory is rebuilt from Next.
	Reason string
	// Recount, from a Recounter, says its store lost the whole partition:
	// Next is unknown, and the partition is counted again from
	// RecountSince back.
	Recount bool
}

func (e *RewindError) Error() string {
	if e.Recount {
		return fmt.Sprintf("topic %s partition %d: the sink's store lost the partition (batch at %d): %s",
			e.Topic, e.Partition, e.First, e.Reason)
	}
	if e.Reason != "" {
		return fmt.Sprintf("topic %s partition %d: reading again from offset %d (batch at %d): %s",
			e.Topic, e.Partition, e.Next, e.First, e.Reason)
	}
	return fmt.Sprintf("topic %s partition %d: the sink holds next offset %d but the batch starts at %d: it lost %d offsets it had acknowledged; reading them again",
		e.Topic, e.Partition, e.Next, e.First, e.First-e.Next)
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
