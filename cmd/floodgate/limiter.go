package main

import (
	"context"
	"log/slog"

	"github.com/floodgate-dev/floodgate/limiter"
)

// LimiterCmd serves limiter lookups.
type LimiterCmd struct {
	Serve LimiterServeCmd `cmd:"" default:"withargs" help:"Serve lookups over Connect/gRPC and HTTP (--http-addr) and Envoy RLS (--rls-addr)."`
}

// LimiterServeCmd serves the three surfaces.
type LimiterServeCmd struct {
	limiter.Config
}

// Run serves until ctx ends, then drains requests in flight.
func (c *LimiterServeCmd) Run(ctx context.Context, logger *slog.Logger) error {
	l, err := limiter.New(c.Config, logger)
	if err != nil {
		return err
	}
	return l.Run(ctx)
}
