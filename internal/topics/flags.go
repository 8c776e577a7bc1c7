package topics

import (
	"context"
	"log/slog"
	"time"

	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
)

// Flags locate the Kafka cluster and floodgate's topics: every process that
// reads or writes them takes these (defaults: scripts/stack's).
type Flags struct {
	kafkaconn.Flags
	Topic          string `name:"topic" env:"FLOODGATE_TOPIC" default:"floodgate.events" help:"Topic of access events."`
	DLQTopic       string `name:"dlq-topic" env:"FLOODGATE_DLQ_TOPIC" default:"floodgate.events.dlq" help:"Dead-letter topic for malformed events."`
	DecisionsTopic string `name:"decisions-topic" env:"FLOODGATE_DECISIONS_TOPIC" default:"floodgate.decisions" help:"Topic where new deny decisions are published."`
}

// CreateFlags are the partition counts used when a topic is created.
type CreateFlags struct {
	Partitions          int `name:"partitions" env:"FLOODGATE_PARTITIONS" default:"12" help:"Partitions of the events topic, if it is created."`
	DLQPartitions       int `name:"dlq-partitions" env:"FLOODGATE_DLQ_PARTITIONS" default:"3" help:"Partitions of the dead-letter topic, if it is created."`
	DecisionsPartitions int `name:"decisions-partitions" env:"FLOODGATE_DECISIONS_PARTITIONS" default:"3" help:"Partitions of the decisions topic, if it is created."`
	ReplicationFactor   int `name:"replication-factor" env:"FLOODGATE_REPLICATION_FACTOR" default:"0" help:"Replication factor of created topics; 0 = the broker's default."`
}

// Specs are the three topics of f as p creates them.
func (p CreateFlags) Specs(f Flags) []Spec {
	specs := Defaults(f.Topic, f.DLQTopic, f.DecisionsTopic)
	for i, n := range []int{p.Partitions, p.DLQPartitions, p.DecisionsPartitions} {
		specs[i].Partitions = n
		specs[i].ReplicationFactor = p.ReplicationFactor
	}
	return specs
}

// EnsureFlags creates f's topics as p says, within timeout, and warns of an
// existing topic whose partition count differs (it is left as it is).
func EnsureFlags(ctx context.Context, log *slog.Logger, f Flags, p CreateFlags, timeout time.Duration) ([]Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	kc, err := f.KafkaCluster(ctx)
	if err != nil {
		return nil, err
	}
	res, err := EnsureOn(ctx, kc, p.Specs(f)...)
	for _, r := range res {
		if r.Partitions != 0 && r.Partitions != r.Wanted {
			log.Warn("topic exists with another partition count; left as it is", "topic", r.Name, "partitions", r.Partitions, "flag", r.Wanted)
		}
	}
	return res, err
}
