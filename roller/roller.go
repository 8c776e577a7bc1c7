// Package roller is the roller process, what `floodgate roller once` and
// `floodgate roller run` start: it applies the retention ladder to history
// (the work itself is internal/retention) once, or every interval while
// serving its metrics. It is public so that a program can run the roller in
// its own process as the CLI does, its configuration being the CLI's flags.
//
//	r, err := roller.New(roller.Config{Postgres: ..., Ladder: ...}, logger)
//	if err != nil { ... }
//	err = r.Run(ctx, time.Minute, "")
package roller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate-dev/floodgate/internal/flagparse"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/metrics"
	"github.com/floodgate-dev/floodgate/internal/postgres"
	"github.com/floodgate-dev/floodgate/internal/retention"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/timespan"
)

// Flags are the connection and ladder settings; the names are the flags'.
type (
	LadderFlags   = history.LadderFlags
	PostgresFlags = postgres.Flags
)

// Config is the roller's configuration: the flags of `floodgate roller`,
// defaults in their tags (docs/cli.md).
type Config struct {
	LadderFlags
	PostgresFlags
	Rules string `name:"rules" env:"FLOODGATE_RULES" default:"examples/rules.yaml" help:"Rules file (YAML), as the aggregator's: its kinds: block gives the personal kinds' history horizons (read at start). The default file missing: the built-in kind defaults (ip, email and user kept 400d), with a warning."`
	Now   string `name:"now" help:"Pretend the time is this (RFC 3339 or 2006-01-02 15:04), for tests and backfills. Default: the clock."`
}

// Roller rolls history down the ladder over its own pool.
type Roller struct {
	r    *retention.Roller
	pool interface{ Close() }
	reg  *prometheus.Registry
	log  *slog.Logger
}

// ParseFlags returns the Config that args give, as `floodgate roller`
// reads them: each flag's FLOODGATE_* variable and default where args do
// not set it.
func ParseFlags(args []string) (Config, error) {
	var cfg Config
	err := flagparse.Parse("roller", &cfg, args)
	return cfg, err
}

// Validate reports the first setting that cannot run, before anything is
// connected.
func (c *Config) Validate() error {
	if _, err := c.ParsedLadder(); err != nil {
		return err
	}
	if c.Now != "" {
		if _, err := timespan.ParseTime(c.Now, time.Now()); err != nil {
			return fmt.Errorf("--now: %w", err)
		}
	}
	return nil
}

// New reads the rules and the ladder and opens the history pool (its
// connections are made on use); Close releases it.
func New(cfg Config, logger *slog.Logger) (*Roller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ladder, err := cfg.ParsedLadder()
	if err != nil {
		return nil, err
	}
	now := time.Now
	if cfg.Now != "" {
		t, err := timespan.ParseTime(cfg.Now, time.Now())
		if err != nil {
			return nil, fmt.Errorf("--now: %w", err)
		}
		now = func() time.Time { return t }
	}
	var set *rules.Set // nil: the built-in kind defaults
	switch err := rules.Found(cfg.Rules); {
	case err != nil:
		// The roller reads rules only for horizons, and the built-in
		// ones hold without a file: run outside the repository it warns
		// rather than refuses, a file named explicitly must load.
		logger.Warn("no rules file: the built-in kind horizons apply (ip, email, user 400d)", "err", err)
	default:
		if set, err = rules.Load(cfg.Rules); err != nil {
			return nil, err
		}
	}
	pool, err := cfg.PostgresFlags.Pool(context.Background(), logger)
	if err != nil {
		return nil, err
	}
	reg := metrics.NewRegistry()
	r, err := retention.New(retention.Config{
		Pool: pool, Ladder: ladder, Horizons: set.HistoryHorizons(), Now: now,
		Logger: logger.With("component", "roller"), Registerer: reg,
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Roller{r: r, pool: pool, reg: reg, log: logger}, nil
}

// Close releases the pool.
func (r *Roller) Close() { r.pool.Close() }

// Once rolls once and prints what moved to w; another roller holding the
// lock is an error.
func (r *Roller) Once(ctx context.Context, w io.Writer) error {
	rep, err := r.r.RunOnce(ctx)
	if errors.Is(err, retention.ErrBusy) {
		return fmt.Errorf("%w; nothing done", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "roller: as of %s, took %s\n", rep.Now.Format(time.RFC3339), rep.Duration.Round(time.Millisecond))
	for _, t := range rep.Tiers {
		rolled := "-infinity"
		if !t.RolledTo.IsZero() {
			rolled = t.RolledTo.Format(time.RFC3339)
		}
		if t.To == "" {
			fmt.Fprintf(w, "  %-3s expired before %s: %d events, %d partitions dropped\n", t.From, rolled, t.Events, t.Dropped)
			continue
		}
		fmt.Fprintf(w, "  %-3s → %-3s rolled up to %s: %d rows → %d rows (%d events) in %d chunks, %d partitions dropped\n",
			t.From, t.To, rolled, t.RowsMoved, t.RowsWritten, t.Events, t.Chunks, t.Dropped)
	}
	for _, f := range rep.Forgotten {
		fmt.Fprintf(w, "  kind %s past its horizon: %d rows (%d events) of %s before %s deleted\n", f.Kind, f.Rows, f.Events, f.Table, f.Before.Format(time.RFC3339))
	}
	return nil
}

// Run rolls every interval until ctx ends, serving /metrics and /healthz
// on metricsAddr (empty: not served).
func (r *Roller) Run(ctx context.Context, every time.Duration, metricsAddr string) error {
	if metricsAddr != "" {
		ln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				r.log.Error("roller metrics server stopped", "err", err)
			}
		}()
		defer srv.Close()
		r.log.Info("roller metrics", "addr", ln.Addr().String())
	}
	return r.r.Run(ctx, every)
}
