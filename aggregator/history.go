package aggregator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/alecthomas/kong"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/rules"
)

// HistoryFlags configure the history consumer group (Postgres minute buckets).
// Embedded in Config.
//
// The consumer group name comes from Config's --history-group flag
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

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// historySink builds the history sink. The returned Closer releases its pool.
func (h *HistoryFlags) historySink(ctx context.Context, logger *slog.Logger) (consume.Sink, io.Closer, error) {
	ladder, err := h.ParsedLadder()
	if err != nil {
		return nil, nil, err
	}
	visitors, err := history.ParseVisitors(h.Visitors)
	if err != nil {
		return nil, nil, fmt.Errorf("--visitors: %w", err)
	}
	hasher, err := h.Hasher()
	if err != nil {
		return nil, nil, err
	}
	var privacy func() (*history.Privacy, error)
	switch {
	case h.Rules != nil:
		src := &history.PrivacySource{Rules: h.Rules, Hasher: hasher}
		if _, err := src.Get(); err != nil { // a clear start-up error
			return nil, nil, err
		}
		privacy = src.Get
	case hasher != nil: // no rules: every kind raw, the visitors keyed
		p, err := history.NewPrivacy(nil, hasher, nil)
		if err != nil {
			return nil, nil, err
		}
		privacy = func() (*history.Privacy, error) { return p, nil }
	}
	pool, err := h.PostgresFlags.Pool(ctx, logger)
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
