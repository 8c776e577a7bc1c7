package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"floodgate/roller"
	"floodgate/rules"
	"floodgate/timespan"
)

// RollerCmd applies the retention ladder to history.
type RollerCmd struct {
	Once RollerOnceCmd `cmd:"" help:"Roll history down the ladder once and exit (fails if another roller holds the lock)."`
	Run  RollerRunCmd  `cmd:"" help:"Roll history down the ladder every interval until stopped."`
}

// rollerFlags are shared by the roller subcommands.
type rollerFlags struct {
	LadderFlags
	PostgresFlags
	Rules string `name:"rules" env:"FLOODGATE_RULES" default:"examples/rules.yaml" help:"Rules file (YAML), as the aggregator's: its kinds: block gives the personal kinds' history horizons (read at start). The default file missing: the built-in kind defaults (ip, email and user kept 400d), with a warning."`
	Now   string `name:"now" help:"Pretend the time is this (RFC 3339 or 2006-01-02 15:04), for tests and backfills. Default: the clock."`
}

func (f *rollerFlags) build(logger *slog.Logger) (*roller.Roller, func(), error) {
	ladder, err := f.ladder()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now
	if f.Now != "" {
		t, err := timespan.ParseTime(f.Now, time.Now())
		if err != nil {
			return nil, nil, fmt.Errorf("--now: %w", err)
		}
		now = func() time.Time { return t }
	}
	var set *rules.Set // nil: the built-in kind defaults
	switch err := rulesFound(f.Rules); {
	case err != nil:
		// The roller reads rules only for horizons, and the built-in
		// ones hold without a file: run outside the repository it warns
		// rather than refuses, a file named explicitly must load.
		logger.Warn("no rules file: the built-in kind horizons apply (ip, email, user 400d)", "err", err)
	default:
		if set, err = rules.Load(f.Rules); err != nil {
			return nil, nil, err
		}
	}
	pool, err := f.PostgresFlags.historyPool(context.Background(), logger)
	if err != nil {
		return nil, nil, err
	}
	r, err := roller.New(roller.Config{
		Pool: pool, Ladder: ladder, Horizons: set.HistoryHorizons(), Now: now,
		Logger: logger.With("component", "roller"), Registerer: prometheus.DefaultRegisterer,
	})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return r, pool.Close, nil
}

// RollerOnceCmd is `floodgate roller once`.
type RollerOnceCmd struct {
	rollerFlags
}

// Run rolls once and prints what moved.
func (c *RollerOnceCmd) Run(ctx context.Context, logger *slog.Logger) error {
	r, closePool, err := c.build(logger)
	if err != nil {
		return err
	}
	defer closePool()
	rep, err := r.RunOnce(ctx)
	if errors.Is(err, roller.ErrBusy) {
		return fmt.Errorf("%w; nothing done", err)
	}
	if err != nil {
		return err
	}
	fmt.Printf("roller: as of %s, took %s\n", rep.Now.Format(time.RFC3339), rep.Duration.Round(time.Millisecond))
	for _, t := range rep.Tiers {
		rolled := "-infinity"
		if !t.RolledTo.IsZero() {
			rolled = t.RolledTo.Format(time.RFC3339)
		}
		if t.To == "" {
			fmt.Printf("  %-3s expired before %s: %d events, %d partitions dropped\n", t.From, rolled, t.Events, t.Dropped)
			continue
		}
		fmt.Printf("  %-3s → %-3s rolled up to %s: %d rows → %d rows (%d events) in %d chunks, %d partitions dropped\n",
			t.From, t.To, rolled, t.RowsMoved, t.RowsWritten, t.Events, t.Chunks, t.Dropped)
	}
	for _, f := range rep.Forgotten {
		fmt.Printf("  kind %s past its horizon: %d rows (%d events) of %s before %s deleted\n", f.Kind, f.Rows, f.Events, f.Table, f.Before.Format(time.RFC3339))
	}
	return nil
}

// RollerRunCmd is `floodgate roller run`.
type RollerRunCmd struct {
	rollerFlags
	Every       time.Duration `name:"every" env:"FLOODGATE_ROLLER_EVERY" default:"1m" help:"Interval between runs."`
	MetricsAddr string        `name:"metrics-addr" env:"FLOODGATE_ROLLER_METRICS_ADDR" default:"" help:"Serve Prometheus /metrics and /healthz on this address (e.g. :9103); empty: off."`
}

// Run rolls every interval until the context ends.
func (c *RollerRunCmd) Run(ctx context.Context, logger *slog.Logger) error {
	r, closePool, err := c.build(logger)
	if err != nil {
		return err
	}
	defer closePool()
	if c.MetricsAddr != "" {
		ln, err := net.Listen("tcp", c.MetricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		// The roller's metrics are in the default registry.
		registerBuildInfo(prometheus.DefaultRegisterer)
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.Handler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		logger.Info("roller metrics", "addr", ln.Addr().String())
	}
	return r.Run(ctx, c.Every)
}
