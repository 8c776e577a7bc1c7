package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/internal/window"

	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
)

// Recent keeps the latest deny decisions read from floodgate.decisions,
// newest first by decision time. It is safe for concurrent use.
type Recent struct {
	size int
	mu   sync.Mutex
	buf  []window.DecisionMessage
	read int64
	err  error // the reader's last error, nil once reading
}

// NewRecent keeps the last size decisions (at least 1).
func NewRecent(size int) *Recent {
	return &Recent{size: max(size, 1)}
}

// Add records a decision. The decisions topic is at least once: a decision
// seen again (same id) is kept once.
func (r *Recent) Add(d window.DecisionMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d.ID != "" {
		for _, o := range r.buf {
			if o.ID == d.ID {
				return
			}
		}
	}
	r.read++
	r.buf = append(r.buf, d)
	// Partitions arrive interleaved, not in time order: sort and trim once
	// the buffer is twice the size, so adding stays cheap.
	if len(r.buf) >= 2*r.size {
		sortNewest(r.buf)
		r.buf = append(r.buf[:0:0], r.buf[:r.size]...)
	}
}

// List returns the kept decisions, newest first, the number read since the
// start, and the reader's error if it is not reading.
func (r *Recent) List() ([]window.DecisionMessage, int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]window.DecisionMessage(nil), r.buf...)
	sortNewest(out)
	if len(out) > r.size {
		out = out[:r.size]
	}
	return out, r.read, r.err
}

func (r *Recent) setErr(err error) {
	r.mu.Lock()
	r.err = err
	r.mu.Unlock()
}

func sortNewest(ds []window.DecisionMessage) {
	sort.SliceStable(ds, func(i, j int) bool {
		if !ds[i].TS.Equal(ds[j].TS) {
			return ds[i].TS.After(ds[j].TS)
		}
		return ds[i].Until.After(ds[j].Until)
	})
}

// Follow reads topic into r until ctx ends: each partition from its last
// r.size messages on (the recent past), then as decisions arrive. While the
// topic cannot be read (not created yet, Kafka down), it retries every few
// seconds and r reports the error.
func Follow(ctx context.Context, brokers []string, topic string, r *Recent, logger *slog.Logger) {
	FollowOn(ctx, kafkaconn.Cluster{Brokers: brokers}, topic, r, logger)
}

// FollowOn is Follow on a cluster reached with TLS or SASL.
func FollowOn(ctx context.Context, cluster kafkaconn.Cluster, topic string, r *Recent, logger *slog.Logger) {
	for {
		err := follow(ctx, cluster, topic, r, logger)
		if ctx.Err() != nil {
			return
		}
		r.setErr(err)
		logger.Warn("dashboard: reading decisions failed; retrying", "topic", topic, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

func follow(ctx context.Context, cluster kafkaconn.Cluster, topic string, r *Recent, logger *slog.Logger) error {
	starts, err := recentOffsets(ctx, cluster, topic, int64(r.size))
	if err != nil {
		return err
	}
	r.setErr(nil)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(starts))
	for p, start := range starts {
		go func() { errc <- readPartition(ctx, cluster, topic, p, start, r, logger) }()
	}
	err = <-errc // the first reader to stop stops them all
	cancel()
	for range len(starts) - 1 {
		<-errc
	}
	return err
}

// recentOffsets returns, per partition, the offset of its last n messages.
func recentOffsets(ctx context.Context, cluster kafkaconn.Cluster, topic string, n int64) (map[int]int64, error) {
	client := cluster.Client(10*time.Second, nil)
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil || len(md.Topics[0].Partitions) == 0 {
		var terr error = errors.New("no partitions")
		if len(md.Topics) == 1 && md.Topics[0].Error != nil {
			terr = md.Topics[0].Error
		}
		return nil, fmt.Errorf("topic %s: %w", topic, terr)
	}
	var reqs []kafka.OffsetRequest
	for _, p := range md.Topics[0].Partitions {
		reqs = append(reqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("offsets of %s: %w", topic, err)
	}
	out := map[int]int64{}
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("offsets of %s/%d: %w", topic, po.Partition, po.Error)
		}
		out[po.Partition] = max(po.FirstOffset, po.LastOffset-n)
	}
	return out, nil
}

func readPartition(ctx context.Context, cluster kafkaconn.Cluster, topic string, p int, start int64, r *Recent, logger *slog.Logger) error {
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: cluster.Brokers, Topic: topic, Partition: p, MaxWait: 500 * time.Millisecond,
		Dialer: cluster.Dialer(nil)})
	defer rd.Close()
	if err := rd.SetOffset(start); err != nil {
		return fmt.Errorf("decisions %s/%d: %w", topic, p, err)
	}
	for {
		m, err := rd.ReadMessage(ctx)
		if err != nil {
			return fmt.Errorf("decisions %s/%d: %w", topic, p, err)
		}
		var d window.DecisionMessage
		if err := json.Unmarshal(m.Value, &d); err != nil {
			logger.Warn("dashboard: skipping a malformed decision", "topic", topic, "partition", p, "offset", m.Offset, "err", err)
			continue
		}
		if d.IsOperator() {
			continue // an operator's ban, unban or reset: the page lists denies
		}
		r.Add(d)
	}
}
