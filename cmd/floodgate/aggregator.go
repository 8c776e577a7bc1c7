package main

import (
	"context"
	"log/slog"

	"github.com/floodgate-dev/floodgate/aggregator"
)

// AggregatorCmd runs the live consumer group and, unless --no-history, the
// history group.
type AggregatorCmd struct {
	aggregator.Config
}

// Run consumes until ctx ends, then finishes the batches in flight.
func (c *AggregatorCmd) Run(ctx context.Context, logger *slog.Logger) error {
	a, err := aggregator.New(c.Config, logger)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
