package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/floodgate-dev/floodgate/roller"
)

// RollerCmd applies the retention ladder to history.
type RollerCmd struct {
	Once RollerOnceCmd `cmd:"" help:"Roll history down the ladder once and exit (fails if another roller holds the lock)."`
	Run  RollerRunCmd  `cmd:"" help:"Roll history down the ladder every interval until stopped."`
}

// RollerOnceCmd is `floodgate roller once`.
type RollerOnceCmd struct {
	roller.Config
}

// Run rolls once and prints what moved.
func (c *RollerOnceCmd) Run(ctx context.Context, logger *slog.Logger) error {
	r, err := roller.New(c.Config, logger)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Once(ctx, os.Stdout)
}

// RollerRunCmd is `floodgate roller run`.
type RollerRunCmd struct {
	roller.Config
	Every       time.Duration `name:"every" env:"FLOODGATE_ROLLER_EVERY" default:"1m" help:"Interval between runs."`
	MetricsAddr string        `name:"metrics-addr" env:"FLOODGATE_ROLLER_METRICS_ADDR" default:"" help:"Serve Prometheus /metrics and /healthz on this address (e.g. :9103); empty: off."`
}

// Run rolls every interval until the context ends.
func (c *RollerRunCmd) Run(ctx context.Context, logger *slog.Logger) error {
	r, err := roller.New(c.Config, logger)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Run(ctx, c.Every, c.MetricsAddr)
}
