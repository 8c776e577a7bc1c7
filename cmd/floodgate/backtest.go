package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/backtest"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/timespan"
)

// BacktestCmd replays the events topic through a rules file and reports
// whom it would have denied (package backtest, docs/backtest.md).
type BacktestCmd struct {
	Rules    string `name:"rules" env:"FLOODGATE_BACKTEST_RULES" required:"" help:"Rules file to backtest (YAML, as the aggregator's)."`
	Baseline string `name:"baseline" env:"FLOODGATE_BACKTEST_BASELINE" help:"Rules file to compare with (typically the one in force): the report adds who is newly denied, no longer denied, denied differently."`
	From     string `name:"from" env:"FLOODGATE_BACKTEST_FROM" required:"" help:"Start of the range reported: RFC 3339, 2026-01-02 15:04 or a date (UTC), or a span ago (90m, 36h, 2d, 1w)."`
	To       string `name:"to" env:"FLOODGATE_BACKTEST_TO" default:"now" help:"End of the range, exclusive; same forms."`

	KafkaConnFlags
	Topic  string        `name:"topic" env:"FLOODGATE_TOPIC" default:"floodgate.events" help:"Topic of access events."`
	Clock  string        `name:"clock" env:"FLOODGATE_BACKTEST_CLOCK" default:"record" enum:"record,event" help:"Time the replay runs on: record (Kafka record times: the live aggregator's clock when it keeps up) or event (the events' ts: for events loaded into a topic after the fact)."`
	WarmUp time.Duration `name:"warm-up" env:"FLOODGATE_BACKTEST_WARM_UP" help:"How long before --from the replay starts, unreported (default: twice the rules' longest window, so that windows and deny records are whole at --from)."`

	MaxFutureSkew time.Duration `name:"max-future-skew" env:"FLOODGATE_MAX_FUTURE_SKEW" default:"1m" help:"As the aggregator's: events further ahead of the clock are refused."`
	Dedup         time.Duration `name:"dedup" env:"FLOODGATE_DEDUP" default:"0s" help:"As the aggregator's: skip an event whose id was counted within this horizon; 0 counts every event."`
	Parallel      int           `name:"parallel" env:"FLOODGATE_BACKTEST_PARALLEL" default:"4" help:"Partitions replayed at once."`
	MaxSubjects   int           `name:"max-subjects" env:"FLOODGATE_BACKTEST_MAX_SUBJECTS" default:"10000" help:"Most distinct subjects per Redis script run of the replay."`
	MaxPending    int           `name:"max-pending" env:"FLOODGATE_BACKTEST_MAX_PENDING" default:"50000" help:"Most bucket fields a partition counts in memory before they are written to the replay's Redis (as the aggregator's write-back)."`

	RedisServer  string `name:"redis-server" env:"FLOODGATE_BACKTEST_REDIS_SERVER" default:"redis-server" help:"redis-server binary the replay runs privately (unix socket in a temp dir, nothing saved, removed at the end)."`
	RedisServers int    `name:"redis-servers" env:"FLOODGATE_BACKTEST_REDIS_SERVERS" help:"Private redis-servers, the partitions spread over them (Redis runs scripts on one core each). Default: half the CPUs, at most --parallel."`
	ScratchRedis string `name:"scratch-redis" env:"FLOODGATE_BACKTEST_SCRATCH_REDIS" help:"Use this scratch Redis (host:port; never the production one) instead of a private server: keys under a unique prefix, deleted at the end."`

	FromHistory bool `name:"from-history" env:"FLOODGATE_BACKTEST_FROM_HISTORY" help:"When the topic no longer holds the range, replay PostgreSQL's minute buckets instead (limits of a minute or more, precise to the minute)."`
	PostgresFlags

	JSON      bool          `name:"json" env:"FLOODGATE_BACKTEST_JSON" xor:"format" help:"Print the report as JSON."`
	CSV       bool          `name:"csv" env:"FLOODGATE_BACKTEST_CSV" xor:"format" help:"Print one CSV row per subject and limit denied."`
	Top       int           `name:"top" env:"FLOODGATE_BACKTEST_TOP" default:"20" help:"Subjects (and changes of each kind) listed in the table; 0 lists all."`
	Decisions string        `name:"decisions" env:"FLOODGATE_BACKTEST_DECISIONS" help:"Write every new decision of the range to this file: NDJSON as on floodgate.decisions, with \"rules\" (candidate or baseline)."`
	Progress  time.Duration `name:"progress" env:"FLOODGATE_BACKTEST_PROGRESS" default:"2s" help:"Progress line on stderr this often; 0: none."`
	exitCodeFlag
}

// Run runs the backtest and prints its report on stdout.
func (c *BacktestCmd) Run(ctx context.Context, logger *slog.Logger) error {
	cfg, closeAll, err := c.config(logger)
	if err != nil {
		return err
	}
	defer closeAll()
	var log *backtest.DecisionLog
	if c.Decisions != "" {
		f, err := os.Create(c.Decisions)
		if err != nil {
			return fmt.Errorf("--decisions: %w", err)
		}
		defer f.Close()
		log = backtest.NewDecisionLog(f)
		cfg.OnDecision = log.Add
	}
	rep, err := backtest.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if log != nil {
		if err := log.Flush(); err != nil {
			return fmt.Errorf("--decisions: %w", err)
		}
	}
	if err := c.write(rep); err != nil {
		return err
	}
	if n := rep.NewDenies(); c.ExitCode && n > 0 {
		return foundError{fmt.Sprintf("%d subjects and rules newly denied", n)}
	}
	return nil
}

func (c *BacktestCmd) write(rep *backtest.Report) error {
	switch {
	case c.JSON:
		return backtest.WriteJSON(os.Stdout, rep)
	case c.CSV:
		return backtest.WriteCSV(os.Stdout, rep)
	}
	top := c.Top
	if top == 0 {
		top = -1
	}
	return backtest.WriteText(os.Stdout, rep, top)
}

// Validate refuses a --from or --to that does not parse: a usage error
// (exit 2); config parses them again.
func (c *BacktestCmd) Validate() error {
	now := time.Now()
	if _, err := timespan.ParseTime(c.From, now); err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	if _, err := timespan.ParseTime(c.To, now); err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	return nil
}

// config turns the flags into a backtest.Config; closeAll releases the
// connections it opened.
func (c *BacktestCmd) config(logger *slog.Logger) (backtest.Config, func(), error) {
	noop := func() {}
	now := time.Now()
	from, err := timespan.ParseTime(c.From, now)
	if err != nil {
		return backtest.Config{}, noop, fmt.Errorf("--from: %w", err)
	}
	to, err := timespan.ParseTime(c.To, now)
	if err != nil {
		return backtest.Config{}, noop, fmt.Errorf("--to: %w", err)
	}
	sec, err := c.KafkaSecurity()
	if err != nil {
		return backtest.Config{}, noop, err
	}
	if err := sec.Check(context.Background(), c.Brokers, 10*time.Second); err != nil {
		return backtest.Config{}, noop, err
	}
	cfg := backtest.Config{
		Security:  sec,
		RulesName: c.Rules, From: from, To: to, WarmUp: c.WarmUp,
		Brokers: c.Brokers, Topic: c.Topic, Clock: backtest.Clock(c.Clock),
		MaxFutureSkew: c.MaxFutureSkew, Dedup: c.Dedup, Parallel: c.Parallel, MaxSubjects: c.MaxSubjects, MaxPending: c.MaxPending,
		RedisServer: c.RedisServer, RedisServers: c.RedisServers, FromHistory: c.FromHistory,
		ProgressEvery: c.Progress, Logger: logger,
	}
	if c.Progress > 0 {
		cfg.Progress = os.Stderr
	}
	if cfg.Rules, err = rules.Load(c.Rules); err != nil {
		return cfg, noop, err
	}
	if c.Baseline != "" {
		cfg.BaselineName = c.Baseline
		if cfg.Baseline, err = rules.Load(c.Baseline); err != nil {
			return cfg, noop, err
		}
	}
	var closers []func()
	closeAll := func() {
		for _, f := range closers {
			f()
		}
	}
	if c.ScratchRedis != "" {
		rdb := redis.NewClient(&redis.Options{Addr: c.ScratchRedis, PoolSize: 2*c.Parallel + 4,
			ReadTimeout: time.Minute, ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: -1})
		closers = append(closers, func() { closeLogged(logger, "scratch redis", rdb) })
		cfg.Scratch = rdb
	}
	if c.FromHistory {
		pool, err := c.PostgresFlags.Pool(context.Background(), logger)
		if err != nil {
			closeAll()
			return cfg, noop, err
		}
		closers = append(closers, pool.Close)
		cfg.History = pool
	}
	return cfg, closeAll, nil
}
