// Package kafkatopics creates and deletes the topics of a test or a suite
// and reads them back: partition offsets and the messages between two sets
// of offsets, the truth a count is compared with.
//
//	k := kafkatopics.New(brokers)
//	end, err := k.EndOffsets(ctx, topic)
//	err = k.ReadRange(ctx, topic, map[int]int64{}, end, func(m kafka.Message) { ... })
package kafkatopics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/internal/topics"
)

// Client creates, deletes and reads topics. Creation goes through
// topics.Ensure, so a suite's topics are made as floodgate makes its own.
type Client struct {
	Brokers []string
	client  *kafka.Client
}

// New returns a Client of the brokers. Its own transport refreshes
// metadata every second (kafka-go's shared default keeps it 6 s), so a
// topic created or recreated a moment ago is known.
func New(brokers []string) *Client {
	return &Client{Brokers: brokers, client: &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second,
		Transport: &kafka.Transport{MetadataTTL: time.Second}}}
}

// CreateTopic creates a topic (idempotent) with the given partitions.
func (k *Client) CreateTopic(ctx context.Context, name string, partitions int) error {
	return k.Create(ctx, topics.Spec{Name: name, Partitions: partitions})
}

// Create creates a topic (idempotent) as spec says: replication factor and
// configuration entries too.
func (k *Client) Create(ctx context.Context, spec topics.Spec) error {
	_, err := topics.Ensure(ctx, k.Brokers, spec)
	return err
}

// DeleteTopics deletes topics, ignoring those that do not exist.
func (k *Client) DeleteTopics(ctx context.Context, names ...string) error {
	resp, err := k.client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: names})
	if err != nil {
		return fmt.Errorf("delete topics %v: %w", names, err)
	}
	var errs []error
	for t, e := range resp.Errors {
		if e != nil && !errors.Is(e, kafka.UnknownTopicOrPartition) {
			errs = append(errs, fmt.Errorf("delete topic %s: %w", t, e))
		}
	}
	return errors.Join(errs...)
}

// Partitions returns the partition ids of a topic.
func (k *Client) Partitions(ctx context.Context, topic string) ([]int, error) {
	md, err := k.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata topic=%s: %w", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("metadata topic=%s: %w", topic, t.Error)
		}
		ps := make([]int, 0, len(t.Partitions))
		for _, p := range t.Partitions {
			ps = append(ps, p.ID)
		}
		return ps, nil
	}
	return nil, fmt.Errorf("metadata topic=%s: not found", topic)
}

// EndOffsets returns each partition's high-water mark.
func (k *Client) EndOffsets(ctx context.Context, topic string) (map[int]int64, error) {
	return k.offsets(ctx, topic, kafka.LastOffset)
}

// StartOffsets returns each partition's first offset.
func (k *Client) StartOffsets(ctx context.Context, topic string) (map[int]int64, error) {
	return k.offsets(ctx, topic, kafka.FirstOffset)
}

func (k *Client) offsets(ctx context.Context, topic string, which int64) (map[int]int64, error) {
	ps, err := k.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	reqs := make([]kafka.OffsetRequest, 0, len(ps))
	for _, p := range ps {
		reqs = append(reqs, kafka.OffsetRequest{Partition: p, Timestamp: which})
	}
	resp, err := k.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("list offsets topic=%s: %w", topic, err)
	}
	out := make(map[int]int64, len(ps))
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("list offsets topic=%s partition=%d: %w", topic, po.Partition, po.Error)
		}
		if which == kafka.FirstOffset {
			out[po.Partition] = po.FirstOffset
		} else {
			out[po.Partition] = po.LastOffset
		}
	}
	return out, nil
}

// Total sums offsets.
func Total(m map[int]int64) int64 {
	var t int64
	for _, v := range m {
		t += v
	}
	return t
}

// ReadRange calls fn for every message of each partition from from[p]
// (inclusive) to to[p] (exclusive).
func (k *Client) ReadRange(ctx context.Context, topic string, from, to map[int]int64, fn func(kafka.Message)) error {
	for p, end := range to {
		start := from[p]
		if start >= end {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers: k.Brokers, Topic: topic, Partition: p,
			MinBytes: 1, MaxBytes: 8 << 20, MaxWait: 200 * time.Millisecond,
		})
		if err := r.SetOffset(start); err != nil {
			_ = r.Close()
			return fmt.Errorf("read topic=%s partition=%d from %d: %w", topic, p, start, err)
		}
		for {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				_ = r.Close()
				return fmt.Errorf("read topic=%s partition=%d at %d: %w", topic, p, start, err)
			}
			fn(m)
			if m.Offset+1 >= end {
				break
			}
		}
		if err := r.Close(); err != nil {
			return fmt.Errorf("close reader topic=%s partition=%d: %w", topic, p, err)
		}
	}
	return nil
}
