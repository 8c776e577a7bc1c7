package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"floodgate/topics"
)

// TopicsCmd creates floodgate's topics; existing ones are left as they are.
type TopicsCmd struct {
	KafkaFlags
	TopicPartitions
	Deadline time.Duration `name:"deadline" aliases:"timeout" env:"FLOODGATE_TOPICS_DEADLINE" default:"60s" help:"Give up on the whole command after this long."`

	out io.Writer `kong:"-"`
}

// TopicPartitions are the partition counts used when a topic is created.
type TopicPartitions struct {
	Partitions          int `name:"partitions" env:"FLOODGATE_PARTITIONS" default:"12" help:"Partitions of the events topic, if it is created."`
	DLQPartitions       int `name:"dlq-partitions" env:"FLOODGATE_DLQ_PARTITIONS" default:"3" help:"Partitions of the dead-letter topic, if it is created."`
	DecisionsPartitions int `name:"decisions-partitions" env:"FLOODGATE_DECISIONS_PARTITIONS" default:"3" help:"Partitions of the decisions topic, if it is created."`
	ReplicationFactor   int `name:"replication-factor" env:"FLOODGATE_REPLICATION_FACTOR" default:"0" help:"Replication factor of created topics; 0 = the broker's default."`
}

func (p TopicPartitions) specs(k KafkaFlags) []topics.Spec {
	specs := topics.Defaults(k.Topic, k.DLQTopic, k.DecisionsTopic)
	for i, n := range []int{p.Partitions, p.DLQPartitions, p.DecisionsPartitions} {
		specs[i].Partitions = n
		specs[i].ReplicationFactor = p.ReplicationFactor
	}
	return specs
}

// ensureTopics creates the topics and logs what it found.
func ensureTopics(ctx context.Context, log *slog.Logger, k KafkaFlags, p TopicPartitions, timeout time.Duration) ([]topics.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	kc, err := k.KafkaCluster(ctx)
	if err != nil {
		return nil, err
	}
	res, err := topics.EnsureOn(ctx, kc, p.specs(k)...)
	for _, r := range res {
		if r.Partitions != 0 && r.Partitions != r.Wanted {
			log.Warn("topic exists with another partition count; left as it is", "topic", r.Name, "partitions", r.Partitions, "flag", r.Wanted)
		}
	}
	return res, err
}

// Run creates the topics and prints one line per topic.
func (c *TopicsCmd) Run(ctx context.Context, log *slog.Logger) error {
	out := c.out
	if out == nil {
		out = os.Stdout
	}
	res, err := ensureTopics(ctx, log, c.KafkaFlags, c.TopicPartitions, c.Deadline)
	if err != nil {
		return err
	}
	for _, r := range res {
		fmt.Fprintln(out, r)
	}
	return nil
}
