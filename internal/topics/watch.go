package topics

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
)

// PartitionCount keeps a topic's partition count, read from metadata at
// start and every interval after: the limiter finds a subject's slot with
// it (murmur2 of the key modulo the count, as producers place events), and
// follows every partition's change stream. Safe for concurrent use.
type PartitionCount struct {
	cluster kafkaconn.Cluster
	topic   string
	n       atomic.Int64
	log     *slog.Logger
}

// NewPartitionCount reads the count once; a missing topic is an error.
func NewPartitionCount(ctx context.Context, brokers []string, topic string, logger *slog.Logger) (*PartitionCount, error) {
	return NewPartitionCountOn(ctx, kafkaconn.Cluster{Brokers: brokers}, topic, logger)
}

// NewPartitionCountOn is NewPartitionCount on a cluster reached with TLS or
// SASL.
func NewPartitionCountOn(ctx context.Context, cluster kafkaconn.Cluster, topic string, logger *slog.Logger) (*PartitionCount, error) {
	if logger == nil {
		logger = slog.Default()
	}
	p := &PartitionCount{cluster: cluster, topic: topic, log: logger}
	n, err := p.read(ctx)
	if err != nil {
		return nil, err
	}
	p.n.Store(int64(n))
	return p, nil
}

// Get returns the last count read.
func (p *PartitionCount) Get() int { return int(p.n.Load()) }

// Run re-reads the count every interval until ctx ends. A failed read
// keeps the last count; a change is logged (growing partitions moves
// subjects between slots: docs/scaling.md).
func (p *PartitionCount) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := p.read(ctx)
		if err != nil {
			p.log.Warn("read partition count; keeping the last", "topic", p.topic, "partitions", p.Get(), "err", err)
			continue
		}
		if old := p.n.Swap(int64(n)); old != int64(n) {
			p.log.Warn("partition count changed: subjects move between slots (see docs/scaling.md)", "topic", p.topic, "was", old, "now", n)
		}
	}
}

func (p *PartitionCount) read(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	parts, err := PartitionsOn(ctx, p.cluster, p.topic)
	if err != nil {
		return 0, err
	}
	n := parts[p.topic]
	if n < 1 {
		return 0, fmt.Errorf("topic %s does not exist (create it with `floodgate topics`)", p.topic)
	}
	return n, nil
}
