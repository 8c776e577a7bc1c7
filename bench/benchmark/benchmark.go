package benchmark

import (
	"context"
	"errors"
	"log/slog"
)

// Options are the benchmark's tunables (flags of floodbench bench).
type Options struct {
	Events int `name:"events" default:"200000" help:"Events per throughput run."`
	Runs   int `name:"runs" default:"3" help:"Runs per figure (the median is reported)."`
}

// Config configures Run.
type Config struct {
	Bin, Repo, RedisAddr, PostgresURL, WorkDir, Out string
	Brokers                                         []string
	Options
	Logger *slog.Logger
}

// Run runs the benchmark.
func Run(ctx context.Context, cfg Config) error { return errors.New("not yet") }
