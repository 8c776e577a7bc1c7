package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Gate holds a topic back from read_committed consumers (floodgate's
// aggregator reads committed records only): an open transaction with one
// record on every partition keeps each partition's last stable offset at
// that record, so what is produced after it stays invisible until Release
// commits the transaction. A topic pre-filled behind a gate appears at once
// to every member of a consumer group that joined before the release, so a
// group's throughput can be timed without a member joining late.
type Gate struct {
	cl       *kgo.Client
	released bool
}

// gateTimeout bounds how long the transaction may stay open (the brokers'
// transaction.max.timeout.ms is 15 minutes by default).
const gateTimeout = 10 * time.Minute

// OpenGate opens the gate's transaction on every partition of topic:
// values[p] is the record written to partition p (consumers read it after
// Release).
func OpenGate(ctx context.Context, brokers []string, topic string, values [][]byte) (*Gate, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("floodgate-bench-gate-"+topic),
		kgo.TransactionTimeout(gateTimeout), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return nil, fmt.Errorf("gate topic=%s: client: %w", topic, err)
	}
	if err := cl.BeginTransaction(); err != nil {
		cl.Close()
		return nil, fmt.Errorf("gate topic=%s: begin transaction: %w", topic, err)
	}
	recs := make([]*kgo.Record, len(values))
	for p, v := range values {
		recs[p] = &kgo.Record{Topic: topic, Partition: int32(p), Value: v}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		g := &Gate{cl: cl}
		return nil, errors.Join(fmt.Errorf("gate topic=%s: produce: %w", topic, err), g.Close())
	}
	return &Gate{cl: cl}, nil
}

// Release commits the transaction: everything behind it becomes visible.
func (g *Gate) Release(ctx context.Context) error {
	if err := g.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("gate: commit: %w", err)
	}
	g.released = true
	return nil
}

// Close aborts the transaction unless it was released, and closes the
// client.
func (g *Gate) Close() error {
	defer g.cl.Close()
	if g.released {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		return fmt.Errorf("gate: abort: %w", err)
	}
	return nil
}
