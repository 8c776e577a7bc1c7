package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"floodgate/aggregator"
	"floodgate/history"
	"floodgate/rules"
)

// HistoryFlags configure the history consumer group (Postgres minute buckets).
// Embedded in AggregatorCmd; owned by the history work.
//
// The consumer group name comes from AggregatorCmd's --history-group flag
// (read in AfterApply): the sink stores its offsets under that name.
type HistoryFlags struct {
	History bool `name:"history" env:"FLOODGATE_HISTORY" default:"true" negatable:"" help:"Run the history consumer group (Postgres minute buckets)."`
	// Visitors names the attr counted as each action's unique visitors
	// (docs/history.md, "Unique visitors").
	Visitors string `name:"visitors" env:"FLOODGATE_VISITORS" default:"" help:"Unique visitors in history: action=attr,... (e.g. visit=ip): per bucket and total, a sketch of the distinct values of that attr of the action's events. Empty: none."`
	LadderFlags
	PostgresFlags
	HistoryKeyFlags

	// Rules are the rules in force (their kinds: block says how history
	// stores each kind); set by the aggregator command. Nil: all raw.
	Rules func() *rules.Set `kong:"-"`
	// Registerer receives the sink's metrics; the aggregator command sets
	// it to the registry it serves. Nil: prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer `kong:"-"`
	// Dedup is the aggregator's --dedup horizon, which history applies too
	// (one flag for both paths; set by the aggregator command).
	Dedup time.Duration `kong:"-"`

	group string // --history-group, set by AfterApply
}

// AfterApply picks up --history-group from the command that embeds h.
func (h *HistoryFlags) AfterApply(kctx *kong.Context) error {
	for _, f := range kctx.Flags() {
		if f.Name == "history-group" {
			if s, ok := kctx.FlagValue(f).(string); ok {
				h.group = s
			}
		}
	}
	return nil
}

// LadderFlags carry the retention ladder (docs/history.md).
type LadderFlags struct {
	Ladder string `name:"ladder" env:"FLOODGATE_LADDER" default:"1m:2d,5m:14d,1h:400d,1d:forever" help:"Retention ladder step:horizon,... finest first (steps 1m 5m 1h 1d 1w; horizons like 2d, 400d or forever)."`
}

func (l LadderFlags) ladder() (history.Ladder, error) {
	ld, err := history.ParseLadder(l.Ladder)
	if err != nil {
		return nil, fmt.Errorf("--ladder: %w", err)
	}
	return ld, nil
}

// historyPool opens a pool without waiting for Postgres: connections are
// made on use, so an outage shows up as retried errors, not a failed start.
// Sessions run in UTC whatever the server's or role's TimeZone.
func historyPool(url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("--postgres-url: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	cfg.MaxConnIdleTime = time.Minute
	// History is UTC throughout (partitions, buckets, curves); the SQL
	// functions pin it themselves, and so does every session of ours.
	cfg.ConnConfig.RuntimeParams["timezone"] = "UTC"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres pool: %w", err)
	}
	return pool, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// historySink builds the history sink. The returned Closer releases its pool.
func (h *HistoryFlags) historySink(ctx context.Context, logger *slog.Logger) (aggregator.Sink, io.Closer, error) {
	ladder, err := h.ladder()
	if err != nil {
		return nil, nil, err
	}
	visitors, err := history.ParseVisitors(h.Visitors)
	if err != nil {
		return nil, nil, fmt.Errorf("--visitors: %w", err)
	}
	hasher, err := h.hasher()
	if err != nil {
		return nil, nil, err
	}
	var privacy func() (*history.Privacy, error)
	switch {
	case h.Rules != nil:
		src := &privacySource{rules: h.Rules, hasher: hasher}
		if _, err := src.get(); err != nil { // a clear start-up error
			return nil, nil, err
		}
		privacy = src.get
	case hasher != nil: // no rules: every kind raw, the visitors keyed
		p, err := history.NewPrivacy(nil, hasher, nil)
		if err != nil {
			return nil, nil, err
		}
		privacy = func() (*history.Privacy, error) { return p, nil }
	}
	pool, err := h.PostgresFlags.historyPool(ctx, logger)
	if err != nil {
		return nil, nil, err
	}
	group := h.group
	if group == "" {
		group = "floodgate-history"
	}
	reg := h.Registerer
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	sink, err := history.NewSink(ctx, history.SinkConfig{
		DB:         pool,
		Group:      group,
		Ladder:     ladder,
		Visitors:   visitors,
		Dedup:      h.Dedup,
		Privacy:    privacy,
		Logger:     logger,
		Registerer: reg,
	})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return sink, closerFunc(func() error { pool.Close(); return nil }), nil
}
