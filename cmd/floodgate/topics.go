package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/floodgate-dev/floodgate/internal/topics"
)

// TopicsCmd creates floodgate's topics; existing ones are left as they are.
type TopicsCmd struct {
	KafkaFlags
	TopicPartitions
	Deadline time.Duration `name:"deadline" aliases:"timeout" env:"FLOODGATE_TOPICS_DEADLINE" default:"60s" help:"Give up on the whole command after this long."`

	out io.Writer `kong:"-"`
}

// Run creates the topics and prints one line per topic.
func (c *TopicsCmd) Run(ctx context.Context, log *slog.Logger) error {
	out := c.out
	if out == nil {
		out = os.Stdout
	}
	res, err := topics.EnsureFlags(ctx, log, c.KafkaFlags, c.TopicPartitions, c.Deadline)
	if err != nil {
		return err
	}
	for _, r := range res {
		fmt.Fprintln(out, r)
	}
	return nil
}
