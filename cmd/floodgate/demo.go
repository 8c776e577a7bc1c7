package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"floodgate/demo"
)

// DemoCmd runs the end-to-end demo on the local stack (make demo).
type DemoCmd struct {
	KafkaFlags
	RedisFlags
	PostgresFlags
	Rules     string        `name:"rules" env:"FLOODGATE_RULES" default:"examples/rules.yaml" help:"Rules file the services run with."`
	Duration  time.Duration `name:"duration" default:"40s" help:"How long the traffic runs."`
	VisitRate int           `name:"visit-rate" default:"800" help:"Link visits per second (two events each)."`
}

// Run starts the services from this same binary and runs the scenario.
func (c *DemoCmd) Run(ctx context.Context) error {
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: find own binary: %w", err)
	}
	return demo.Run(ctx, demo.Config{
		Bin: bin, Brokers: c.Brokers, RedisAddr: c.RedisAddr[0], PostgresURL: c.PostgresURL,
		Rules: c.Rules, Decisions: c.DecisionsTopic, Duration: c.Duration, VisitRate: c.VisitRate,
	})
}
