package consume

import (
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// committer coalesces the workers' progress into one OffsetCommit per
// interval for all of a member's partitions. A commit after every batch
// was a coordinator round trip on the partition's apply path: at moderate
// rates, where batches are small, it took half the live aggregator's CPU
// and delayed the next batch. Commits are advisory — the sink's offsets
// are the truth — so committing late loses nothing; a failed commit (the
// generation ended, the coordinator moved) costs a stale lag figure.
type committer struct {
	gen   *kafka.Generation
	topic string
	log   *slog.Logger

	mu      sync.Mutex
	pending map[int]int64 // partition → next offset, not yet committed
}

func newCommitter(gen *kafka.Generation, topic string, log *slog.Logger) *committer {
	return &committer{gen: gen, topic: topic, log: log, pending: map[int]int64{}}
}

// mark records that partition's next offset is next.
func (c *committer) mark(partition int, next int64) {
	c.mu.Lock()
	c.pending[partition] = next
	c.mu.Unlock()
}

// flush commits what was marked since the last flush.
func (c *committer) flush() {
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.mu.Unlock()
		return
	}
	offsets := maps.Clone(c.pending)
	clear(c.pending)
	c.mu.Unlock()
	if err := c.gen.CommitOffsets(map[string]map[int]int64{c.topic: offsets}); err != nil {
		c.log.Debug("commit offsets (advisory)", "offsets", offsets, "err", err)
	}
}

// run flushes every interval until done closes, then once more.
func (c *committer) run(done <-chan struct{}, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.flush()
		case <-done:
			c.flush()
			return
		}
	}
}
