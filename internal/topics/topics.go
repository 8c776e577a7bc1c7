package topics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
)

// Default partition counts of floodgate's topics.
const (
	DefaultEventsPartitions    = 12
	DefaultDLQPartitions       = 3
	DefaultDecisionsPartitions = 3
)

// Spec describes one topic.
type Spec struct {
	// Name of the topic: 1..249 characters of [a-zA-Z0-9._-]. Required.
	Name string
	// Partitions of a new topic; at least 1. Required.
	Partitions int
	// ReplicationFactor of a new topic. Default (0): the broker's
	// default.replication.factor.
	ReplicationFactor int
	// Configs are topic configuration entries of a new topic, e.g.
	// "retention.ms". Default: none (broker defaults).
	Configs map[string]string
}

// Validate reports an invalid name or partition count.
func (s Spec) Validate() error {
	if s.Name == "" || len(s.Name) > 249 || s.Name == "." || s.Name == ".." {
		return fmt.Errorf("topic %q: name must be 1..249 characters, not . or ..", s.Name)
	}
	for _, c := range s.Name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic %q: only [a-zA-Z0-9._-] allowed", s.Name)
		}
	}
	if s.Partitions < 1 {
		return fmt.Errorf("topic %q: partitions %d, want at least 1", s.Name, s.Partitions)
	}
	if s.ReplicationFactor < 0 {
		return fmt.Errorf("topic %q: replication factor %d must not be negative", s.Name, s.ReplicationFactor)
	}
	return nil
}

// EventsMaxMessageBytes is the events topic's max.message.bytes: the
// largest record batch, as sent (compressed), the broker accepts. The
// contract's batches are at most 1 MiB before compression (events of at
// most 4 KiB, producer.DefaultBatchBytes); the rest is room for a batch's
// framing. It bounds what a producer can put in one batch on the wire,
// whatever the broker's default, not what the batch decompresses to (the
// aggregator bounds that: consume.MaxBatchDecompressed).
const EventsMaxMessageBytes = 1<<20 + 32<<10

// Defaults returns the specs of floodgate's three topics with their default
// partition counts: events (12, with max.message.bytes
// EventsMaxMessageBytes), its dead-letter topic (3) and decisions (3).
func Defaults(events, dlq, decisions string) []Spec {
	return []Spec{
		{Name: events, Partitions: DefaultEventsPartitions,
			Configs: map[string]string{"max.message.bytes": strconv.Itoa(EventsMaxMessageBytes)}},
		{Name: dlq, Partitions: DefaultDLQPartitions},
		{Name: decisions, Partitions: DefaultDecisionsPartitions},
	}
}

// Result is what Ensure found or did for one topic.
type Result struct {
	Name       string
	Created    bool // false: the topic already existed
	Partitions int  // partitions the topic has now
	Wanted     int  // partitions the Spec asked for
}

// String returns e.g. "floodgate.events: exists, 6 partitions (spec: 12)".
func (r Result) String() string {
	verb := "exists"
	if r.Created {
		verb = "created"
	}
	s := fmt.Sprintf("%s: %s, %d partitions", r.Name, verb, r.Partitions)
	if r.Partitions != r.Wanted {
		s += fmt.Sprintf(" (spec: %d)", r.Wanted)
	}
	return s
}

// Ensure creates the topics of specs that do not exist yet, then waits (up
// to ctx) until every partition of every topic has a leader. Existing
// topics are left as they are. Results follow the order of specs.
func Ensure(ctx context.Context, brokers []string, specs ...Spec) ([]Result, error) {
	return EnsureOn(ctx, kafkaconn.Cluster{Brokers: brokers}, specs...)
}

// EnsureOn is Ensure on a cluster reached with TLS or SASL.
func EnsureOn(ctx context.Context, cluster kafkaconn.Cluster, specs ...Spec) ([]Result, error) {
	brokers := cluster.Brokers
	if len(brokers) == 0 {
		return nil, errors.New("ensure topics: no broker address")
	}
	if len(specs) == 0 {
		return nil, nil
	}
	configs := make([]kafka.TopicConfig, len(specs))
	for i, s := range specs {
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("ensure topics: %w", err)
		}
		rf := s.ReplicationFactor
		if rf == 0 {
			rf = -1 // broker default
		}
		configs[i] = kafka.TopicConfig{Topic: s.Name, NumPartitions: s.Partitions, ReplicationFactor: rf}
		for _, k := range slices.Sorted(maps.Keys(s.Configs)) {
			configs[i].ConfigEntries = append(configs[i].ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: s.Configs[k]})
		}
	}

	client, closeClient := newClient(cluster)
	defer closeClient()
	resp, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: configs})
	if err != nil {
		return nil, fmt.Errorf("ensure topics brokers=%s: create: %w", strings.Join(brokers, ","), err)
	}
	results := make([]Result, len(specs))
	var errs []error
	for i, s := range specs {
		results[i] = Result{Name: s.Name, Wanted: s.Partitions}
		switch err := resp.Errors[s.Name]; {
		case err == nil:
			results[i].Created = true
		case errors.Is(err, kafka.TopicAlreadyExists):
		default:
			errs = append(errs, fmt.Errorf("create topic %s partitions=%d: %w", s.Name, s.Partitions, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return results, fmt.Errorf("ensure topics: %w", err)
	}

	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	parts, err := waitReady(ctx, client, names)
	if err != nil {
		return results, fmt.Errorf("ensure topics: %w", err)
	}
	for i := range results {
		results[i].Partitions = parts[results[i].Name]
	}
	return results, nil
}

// Delete deletes topics; a topic that does not exist is a success. It is
// meant for tests and tear-downs.
func Delete(ctx context.Context, brokers []string, names ...string) error {
	return DeleteOn(ctx, kafkaconn.Cluster{Brokers: brokers}, names...)
}

// DeleteOn is Delete on a cluster reached with TLS or SASL.
func DeleteOn(ctx context.Context, cluster kafkaconn.Cluster, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	client, closeClient := newClient(cluster)
	defer closeClient()
	resp, err := client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: names})
	if err != nil {
		return fmt.Errorf("delete topics %s: %w", strings.Join(names, ","), err)
	}
	var errs []error
	for _, name := range names {
		if err := resp.Errors[name]; err != nil && !errors.Is(err, kafka.UnknownTopicOrPartition) {
			errs = append(errs, fmt.Errorf("delete topic %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Partitions returns the partition count of each existing topic of names.
func Partitions(ctx context.Context, brokers []string, names ...string) (map[string]int, error) {
	return PartitionsOn(ctx, kafkaconn.Cluster{Brokers: brokers}, names...)
}

// PartitionsOn is Partitions on a cluster reached with TLS or SASL.
func PartitionsOn(ctx context.Context, cluster kafkaconn.Cluster, names ...string) (map[string]int, error) {
	client, closeClient := newClient(cluster)
	defer closeClient()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		return nil, fmt.Errorf("topic metadata %s: %w", strings.Join(names, ","), err)
	}
	out := make(map[string]int, len(md.Topics))
	for _, t := range md.Topics {
		if t.Error == nil {
			out[t.Name] = len(t.Partitions)
		}
	}
	return out, nil
}

// PartitionIDs returns the ids of topic's partitions, sorted, read with a
// client the caller already holds.
func PartitionIDs(ctx context.Context, client *kafka.Client, topic string) ([]int, error) {
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of topic %s: %w", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("metadata of topic %s: %w", topic, t.Error)
		}
		ps := make([]int, 0, len(t.Partitions))
		for _, p := range t.Partitions {
			ps = append(ps, p.ID)
		}
		slices.Sort(ps)
		return ps, nil
	}
	return nil, fmt.Errorf("topic %s not found", topic)
}

func newClient(cluster kafkaconn.Cluster) (*kafka.Client, func()) {
	client := cluster.Client(30*time.Second, &kafka.Transport{ClientID: "floodgate-topics"})
	return client, client.Transport.(*kafka.Transport).CloseIdleConnections
}

// waitReady polls metadata until every partition of every topic of names has
// a leader, and returns the partition counts.
func waitReady(ctx context.Context, client *kafka.Client, names []string) (map[string]int, error) {
	delay := 50 * time.Millisecond
	for {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
		var notReady string
		parts := make(map[string]int, len(names))
		if err != nil {
			notReady = err.Error()
		} else {
			byName := make(map[string]kafka.Topic, len(md.Topics))
			for _, t := range md.Topics {
				byName[t.Name] = t
			}
		check:
			for _, name := range names {
				t, ok := byName[name]
				switch {
				case !ok:
					notReady = name + " not in metadata"
					break check
				case t.Error != nil:
					notReady = fmt.Sprintf("%s: %v", name, t.Error)
					break check
				case len(t.Partitions) == 0:
					notReady = name + " has no partitions yet"
					break check
				}
				for _, p := range t.Partitions {
					if p.Error != nil || p.Leader.Host == "" {
						notReady = fmt.Sprintf("%s partition %d has no leader yet", name, p.ID)
						break check
					}
				}
				parts[name] = len(t.Partitions)
			}
		}
		if notReady == "" {
			return parts, nil
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("wait for topics %s to be ready (last: %s): %w", strings.Join(names, ","), notReady, ctx.Err())
		case <-timer.C:
		}
		delay = min(2*delay, time.Second)
	}
}
