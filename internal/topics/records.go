package topics

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
)

// kafka-go has no DeleteRecords call (the admin API behind Kafka's
// kafka-delete-records.sh), so this package defines the message itself:
// versions 0 and 1 of the request and response (the same fields; 2 is the
// flexible encoding of them), registered with kafka-go's protocol package
// as its own messages are, in init: registering later could race with
// requests in flight.
func init() {
	protocol.Register(&deleteRecordsRequest{}, &deleteRecordsResponse{})
}

type deleteRecordsRequest struct {
	Topics    []deleteRecordsTopic `kafka:"min=v0,max=v1"`
	TimeoutMs int32                `kafka:"min=v0,max=v1"`
}

type deleteRecordsTopic struct {
	Name       string                   `kafka:"min=v0,max=v1"`
	Partitions []deleteRecordsPartition `kafka:"min=v0,max=v1"`
}

type deleteRecordsPartition struct {
	PartitionIndex int32 `kafka:"min=v0,max=v1"`
	Offset         int64 `kafka:"min=v0,max=v1"`
}

func (r *deleteRecordsRequest) ApiKey() protocol.ApiKey { return protocol.DeleteRecords }

// Broker routes the request to the leader of its one partition: a broker
// deletes records of the partitions it leads only.
func (r *deleteRecordsRequest) Broker(c protocol.Cluster) (protocol.Broker, error) {
	if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
		return protocol.Broker{}, errors.New("delete records: one partition per request")
	}
	name, p := r.Topics[0].Name, r.Topics[0].Partitions[0].PartitionIndex
	t, ok := c.Topics[name]
	if !ok {
		return protocol.Broker{}, fmt.Errorf("delete records: topic %s not in metadata", name)
	}
	part, ok := t.Partitions[p]
	if !ok {
		return protocol.Broker{}, fmt.Errorf("delete records: topic %s has no partition %d", name, p)
	}
	b, ok := c.Brokers[part.Leader]
	if !ok {
		return protocol.Broker{}, fmt.Errorf("delete records: topic %s partition %d has no leader", name, p)
	}
	return b, nil
}

type deleteRecordsResponse struct {
	ThrottleTimeMs int32                      `kafka:"min=v0,max=v1"`
	Topics         []deleteRecordsTopicResult `kafka:"min=v0,max=v1"`
}

type deleteRecordsTopicResult struct {
	Name       string                         `kafka:"min=v0,max=v1"`
	Partitions []deleteRecordsPartitionResult `kafka:"min=v0,max=v1"`
}

type deleteRecordsPartitionResult struct {
	PartitionIndex int32 `kafka:"min=v0,max=v1"`
	LowWatermark   int64 `kafka:"min=v0,max=v1"`
	ErrorCode      int16 `kafka:"min=v0,max=v1"`
}

func (r *deleteRecordsResponse) ApiKey() protocol.ApiKey { return protocol.DeleteRecords }

var _ protocol.BrokerMessage = (*deleteRecordsRequest)(nil)

// DeleteRecords deletes the records of topic below the given offset of each
// partition (kafka.LastOffset: all of them), as retention does when it
// drops old segments: the partition's log then starts at that offset. It
// returns each partition's new log start. It is meant for tests and fault
// drills (a consumer that falls behind retention).
func DeleteRecords(ctx context.Context, brokers []string, topic string, before map[int]int64) (map[int]int64, error) {
	return DeleteRecordsOn(ctx, kafkaconn.Cluster{Brokers: brokers}, topic, before)
}

// DeleteRecordsOn is DeleteRecords on a cluster reached with TLS or SASL.
func DeleteRecordsOn(ctx context.Context, cluster kafkaconn.Cluster, topic string, before map[int]int64) (map[int]int64, error) {
	client, closeClient := newClient(cluster)
	defer closeClient()
	transport := client.Transport.(*kafka.Transport)
	parts := make([]int, 0, len(before))
	for p := range before {
		parts = append(parts, p)
	}
	sort.Ints(parts)
	starts := make(map[int]int64, len(parts))
	for _, p := range parts {
		off := before[p]
		req := &deleteRecordsRequest{
			Topics: []deleteRecordsTopic{{Name: topic, Partitions: []deleteRecordsPartition{{
				PartitionIndex: int32(p), Offset: off}}}},
			TimeoutMs: 30_000,
		}
		res, err := transport.RoundTrip(ctx, client.Addr, req)
		if err != nil {
			return starts, fmt.Errorf("delete records topic %s partition %d below %d: %w", topic, p, off, err)
		}
		r, ok := res.(*deleteRecordsResponse)
		if !ok || len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
			return starts, fmt.Errorf("delete records topic %s partition %d: unexpected response %T", topic, p, res)
		}
		pr := r.Topics[0].Partitions[0]
		if pr.ErrorCode != 0 {
			return starts, fmt.Errorf("delete records topic %s partition %d below %d: %w", topic, p, off, kafka.Error(pr.ErrorCode))
		}
		starts[p] = pr.LowWatermark
	}
	return starts, nil
}
