package main

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"floodgate/aggregator"
)

// HistoryFlags configure the history consumer group (Postgres minute buckets).
// Embedded in AggregatorCmd; owned by the history work.
type HistoryFlags struct {
	History bool `name:"history" env:"FLOODGATE_HISTORY" default:"true" negatable:"" help:"Run the history consumer group (Postgres minute buckets)."`
	PostgresFlags
}

// historySink builds the history sink. The returned Closer releases its pool.
func (h *HistoryFlags) historySink(ctx context.Context, logger *slog.Logger) (aggregator.Sink, io.Closer, error) {
	return nil, nil, errors.New("history sink not implemented yet")
}
