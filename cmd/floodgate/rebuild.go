package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/recovery"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// RebuildCmd rebuilds the live Redis counters from Kafka, offline (see
// package recovery and docs/faults.md). A running aggregator recounts
// what Redis lost by itself (consume.Recounter); this is for
// --evaluate-all, whose sink cannot tell, and for an operator's reset of
// the whole prefix. Run it with the live aggregator stopped.
type RebuildCmd struct {
	KafkaFlags
	RedisFlags

	Rules      string        `name:"rules" env:"FLOODGATE_RULES" default:"examples/rules.yaml" help:"Rules file (YAML), as the aggregator's."`
	LiveGroup  string        `name:"live-group" aliases:"group" env:"FLOODGATE_LIVE_GROUP" default:"floodgate-live" help:"Consumer group of the live path."`
	KeyPrefix  string        `name:"key-prefix" env:"FLOODGATE_KEY_PREFIX" default:"fg" help:"Prefix of every Redis key."`
	Since      time.Duration `name:"since" env:"FLOODGATE_REBUILD_SINCE" help:"How far back to replay (default: the longest rule window + 1m)."`
	Reset      bool          `name:"reset" help:"Delete every key under the prefix first and replay every partition (the aggregator kept running after Redis came back)."`
	MaxPending int           `name:"max-pending" env:"FLOODGATE_MAX_PENDING" default:"50000" help:"Most bucket fields a partition counts in memory before they are written to Redis (a checkpoint, as the aggregator's write-back)."`

	OnLostOffsets string `name:"on-lost-offsets" env:"FLOODGATE_ON_LOST_OFFSETS" default:"skip" enum:"skip,stop" help:"When records the live group had not counted are gone from the log (retention, topic recreated): skip (report and replay what the log holds) or stop (fail; nothing is written when that is known before the replay)."`
}

// Run replays the topic into Redis and reports what it did.
func (c *RebuildCmd) Run(ctx context.Context, logger *slog.Logger) error {
	set, err := rules.LoadFile(c.Rules)
	if err != nil {
		return err
	}
	lc, err := window.Dial(ctx, logger, &c.RedisFlags, &c.KafkaFlags, c.KeyPrefix, nil)
	if err != nil {
		return err
	}
	defer closeLogged(logger, "redis", lc)
	rdb, kc, store := lc.Redis, lc.Kafka, lc.Store
	applier, err := live.NewApplier(store, live.ApplierConfig{WriteBack: true})
	if err != nil {
		return err
	}
	res, err := recovery.Rebuild(ctx, recovery.Config{
		Brokers: c.Brokers, Security: kc.Security, Topic: c.Topic, Group: c.LiveGroup, Store: store, Applier: applier, Rules: set, Since: c.Since,
		Reset: c.Reset, Redis: rdb, Logger: logger, OnLostOffsets: consume.LostOffsetsPolicy(c.OnLostOffsets), MaxPending: c.MaxPending,
	})
	if err != nil {
		return err
	}
	fmt.Printf("rebuild: %d partitions replayed (%d skipped, %d keys reset): %d messages, %d events counted, %d malformed, %d offsets lost to retention, %d partitions recreated, from %s, in %s\n",
		res.Partitions, res.Skipped, res.Deleted, res.Messages, res.Events, res.Invalid, res.Lost, res.Recreated, res.From.Format(time.RFC3339), res.Took.Round(time.Millisecond))
	return nil
}
