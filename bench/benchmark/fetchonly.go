package benchmark

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
)

// fetchOnly reads every partition of topic from its start to its end at
// once, with the aggregator's Fetcher (its fetch requests and batch
// reader, the copies the aggregator makes), and counts the records: no
// decoding unless decode, no applying. Its rate is the ceiling of any floodgate consumer on this
// machine, set against ConsumerPerformance's on the same topic, so the
// distance of the live aggregator from the Java tool splits into the client
// library's part and floodgate's own.
func (b *bench) fetchOnly(ctx context.Context, topic string, decode bool) (float64, error) {
	client := &kafka.Client{Addr: kafka.TCP(b.cfg.Brokers...), Timeout: 30 * time.Second,
		Transport: &kafka.Transport{MetadataTTL: 2 * time.Second, DialTimeout: 5 * time.Second}}
	defer client.Transport.(*kafka.Transport).CloseIdleConnections()
	var records atomic.Int64
	var once sync.Once
	var start time.Time
	g, ctx := errgroup.WithContext(ctx)
	for p := range b.cfg.PartCount {
		g.Go(func() error {
			f, err := consume.NewFetcher(consume.FetcherConfig{Client: client, Topic: topic, Partition: p,
				Offset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
			if err != nil {
				return err
			}
			_, end, err := f.Bounds(ctx)
			if err != nil {
				return err
			}
			once.Do(func() { start = time.Now() })
			for f.Next() < end {
				msgs, err := f.Fetch(ctx)
				if err != nil {
					return err
				}
				for i := 0; decode && i < len(msgs); i++ {
					if _, err := event.Decode(msgs[i].Value); err != nil {
						return fmt.Errorf("partition %d offset %d: %w", p, msgs[i].Offset, err)
					}
				}
				records.Add(int64(len(msgs)))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, fmt.Errorf("fetch %s alone: %w", topic, err)
	}
	return float64(records.Load()) / time.Since(start).Seconds(), nil
}
