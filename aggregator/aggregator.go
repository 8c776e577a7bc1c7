// Package aggregator is the aggregator process, what `floodgate
// aggregator` starts: the live consumer group, which keeps every subject's
// windows and decisions (internal/live) and checkpoints them to Redis, and
// the history group, which writes minute buckets to PostgreSQL
// (internal/history), each with its Kafka offsets in the same write; with
// --owner-takes, the take surfaces too. It wires the packages that do that
// work and serves the metrics. It is public so that a program can run an
// aggregator in its own process as the CLI does, its configuration being
// the CLI's flags.
//
//	a, err := aggregator.New(cfg, logger) // cfg: the flags' values
//	if err != nil { ... }
//	err = a.Run(ctx) // until ctx ends, then finishes the batches in flight
package aggregator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/flagparse"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/metrics"
	"github.com/floodgate-dev/floodgate/internal/postgres"
	"github.com/floodgate-dev/floodgate/internal/redisconn"
	"github.com/floodgate-dev/floodgate/internal/rules/reload"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// The settings an aggregator shares with the other processes; the names
// are the flags' groups.
type (
	RedisFlags      = redisconn.Flags
	KafkaFlags      = topics.Flags
	PostgresFlags   = postgres.Flags
	LadderFlags     = history.LadderFlags
	HistoryKeyFlags = history.KeyFlags
)

// Aggregator is an aggregator process.
type Aggregator struct {
	cfg Config
	log *slog.Logger
}

// ParseFlags returns the Config that args give, as `floodgate aggregator`
// reads them: each flag's FLOODGATE_* variable and default where args do
// not set it.
func ParseFlags(args []string) (Config, error) {
	var cfg Config
	err := flagparse.Parse("aggregator", &cfg, args)
	return cfg, err
}

// Validate reports the first setting that cannot run, before anything is
// connected.
func (c *Config) Validate() error {
	switch {
	case c.Procs < 0 || c.Procs > maxProcs:
		return fmt.Errorf("--procs %d: want 0 (the default) to %d", c.Procs, maxProcs)
	case c.OwnerTakes && (c.CheckpointInterval <= 0 || c.EvaluateAll):
		return errors.New("--owner-takes answers from write-back memory: it needs --checkpoint-interval > 0 and no --evaluate-all")
	case c.MaxSubjects <= 0 || c.BatchMax <= 0:
		return fmt.Errorf("--max-subjects %d, --batch-max %d: want both above 0", c.MaxSubjects, c.BatchMax)
	case c.ReadAheadBytes <= 0:
		return fmt.Errorf("--read-ahead-bytes %d: want above 0", c.ReadAheadBytes)
	case c.CheckpointInterval < 0 || c.DenyRefresh < 0 || c.Dedup < 0:
		return errors.New("--checkpoint-interval, --deny-refresh and --dedup cannot be negative")
	}
	return nil
}

// New returns the aggregator cfg configures (an error when it does not
// validate); Run starts it.
func New(cfg Config, logger *slog.Logger) (*Aggregator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Aggregator{cfg: cfg, log: logger}, nil
}

// Run connects, consumes until ctx ends, then finishes the batches in
// flight and returns.
func (a *Aggregator) Run(ctx context.Context) error { return a.cfg.run(ctx, a.log) }

// Config is the aggregator's configuration: the flags of `floodgate
// aggregator`, defaults in their tags (docs/cli.md). It runs the live
// consumer group (Redis counters and deny records) and, unless
// --no-history, the history group (Postgres).
type Config struct {
	KafkaFlags
	RedisFlags
	HistoryFlags
	OwnerTakesFlags

	Rules              string        `name:"rules" env:"FLOODGATE_RULES" default:"examples/rules.yaml" help:"Rules file (YAML); reloaded on SIGHUP and on change."`
	LiveGroup          string        `name:"live-group" aliases:"group" env:"FLOODGATE_LIVE_GROUP" default:"floodgate-live" help:"Consumer group of the live path (Redis)."`
	HistoryGroup       string        `name:"history-group" env:"FLOODGATE_HISTORY_GROUP" default:"floodgate-history" help:"Consumer group of the history path (Postgres)."`
	KeyPrefix          string        `name:"key-prefix" env:"FLOODGATE_KEY_PREFIX" default:"fg" help:"Prefix of every Redis key."`
	MaxSubjects        int           `name:"max-subjects" env:"FLOODGATE_MAX_SUBJECTS" default:"1000" help:"Most distinct subjects per Redis script run; larger batches are split (bounds how long a script blocks Redis)."`
	MetricsAddr        string        `name:"metrics-addr" env:"FLOODGATE_AGGREGATOR_METRICS_ADDR,FLOODGATE_METRICS_ADDR" default:"127.0.0.1:9464" help:"Address serving /metrics and /healthz (port 0 picks one)."`
	BatchMax           int           `name:"batch-max" env:"FLOODGATE_BATCH_MAX" default:"10000" help:"Most messages in one batch."`
	BatchWait          time.Duration `name:"batch-wait" env:"FLOODGATE_BATCH_WAIT" default:"0s" help:"Keep filling a batch this long after its first message (0: apply what is fetched at once; batches grow only with a backlog)."`
	ReadAheadBytes     int64         `name:"read-ahead-bytes" env:"FLOODGATE_READ_AHEAD_BYTES" default:"16777216" help:"Most bytes of fetched records a partition holds ahead of the batch being applied, decompressed, and what one fetch may hold (a fetch stops before the record that would pass it; the next reads on). Bounds memory whatever the producers write: at most 4 × this + 10 MiB per assigned partition and group."`
	EvaluateAll        bool          `name:"evaluate-all" env:"FLOODGATE_EVALUATE_ALL" help:"Evaluate every touched subject on every batch, in the apply script (no headroom, no bucket copies; for comparisons)."`
	OnLostOffsets      string        `name:"on-lost-offsets" env:"FLOODGATE_ON_LOST_OFFSETS" default:"skip" enum:"skip,stop" help:"When the log no longer holds a partition's next offset (retention, topic recreated): skip (report and go on) or stop the partition."`
	Dedup              time.Duration `name:"dedup" env:"FLOODGATE_DEDUP" default:"0s" help:"Skip an event whose id was counted within this horizon (a producer's retry), live (ids in Redis) and in history (ids in Postgres, floodgate.history_ids); 0 counts every event."`
	CheckpointInterval time.Duration `name:"checkpoint-interval" env:"FLOODGATE_CHECKPOINT_INTERVAL" default:"1s" help:"Write-back: window-only subjects are counted in this process's memory and written to Redis this often per partition (and at revoke and shutdown); Redis's counts of them lag by up to this much (a denied subject's retry time: --deny-refresh). 0 writes every batch through (as does --evaluate-all)."`
	DenyRefresh        time.Duration `name:"deny-refresh" env:"FLOODGATE_DENY_REFRESH" default:"30s" help:"Write-back: while a subject stays denied, its state (retry time, counts) is written again only this often, not at every checkpoint; limiters report them up to this old meanwhile (a retry time earlier than the truth, never later; allow or deny is never delayed). 0 writes them at every checkpoint."`
	MaxPending         int           `name:"max-pending" env:"FLOODGATE_MAX_PENDING" default:"50000" help:"Write-back: most bucket fields a partition holds in memory before a batch writes them at once (bounds memory: while checkpoints fail past it, batches wait)."`
	CheckpointPart     int           `name:"checkpoint-part" env:"FLOODGATE_CHECKPOINT_PART" default:"256" help:"Write-back: most bucket fields one checkpoint script run writes; a larger checkpoint goes in parts that each mark their subjects, so that no run holds Redis, and the decisions queued behind it, for long."`
	RelayKeep          time.Duration `name:"relay-keep" env:"FLOODGATE_RELAY_KEEP" default:"1m" help:"How long published change entries stay in Redis for limiters that reconnect."`
	MaxFutureSkew      time.Duration `name:"max-future-skew" env:"FLOODGATE_MAX_FUTURE_SKEW" default:"1m" help:"Events further ahead of this clock are dead-lettered; events ahead by less are counted at this clock's time."`
	SessionTimeout     time.Duration `name:"session-timeout" env:"FLOODGATE_SESSION_TIMEOUT" default:"10s" help:"Consumer group session timeout: how soon a dead member's partitions move."`
	CommitInterval     time.Duration `name:"commit-interval" env:"FLOODGATE_COMMIT_INTERVAL" default:"1s" help:"How often progress is committed to the consumer groups (advisory: the sinks' offsets are the truth; for lag monitors)."`
	Procs              int           `name:"procs" env:"FLOODGATE_PROCS" default:"0" help:"Goroutines running Go code at once (GOMAXPROCS). 0: one more than the CPUs, unless GOMAXPROCS is set or a CPU quota lowers the runtime's default: with every one busy, a batch waiting on Redis's reply is woken only when the runtime next polls the network, milliseconds later (docs/operations.md, \"CPU\")."`

	cluster kafkaconn.Cluster `kong:"-"` // the brokers and how to reach them, resolved by Run
}

// run wires the groups and serves metrics until ctx ends, then finishes the
// batches in flight and returns.
func (c *Config) run(ctx context.Context, logger *slog.Logger) error {
	if err := setProcs(c.Procs, logger); err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	watcher, err := reload.Watch(c.Rules, logger, reg)
	if err != nil {
		return err
	}

	lc, err := window.Dial(ctx, logger, &c.RedisFlags, &c.KafkaFlags, c.KeyPrefix, reg)
	if err != nil {
		return err
	}
	defer closeLogged(logger, "redis", lc)
	rdb, kc, parts, store := lc.Redis, lc.Kafka, lc.Parts, lc.Store
	c.cluster = kc
	if err := c.requireOutputTopics(ctx); err != nil {
		return err
	}
	applier, err := c.applier(ctx, store, logger)
	if err != nil {
		return err
	}

	dlq := c.writer(c.DLQTopic)
	defer closeLogged(logger, "dead-letter writer", dlq)
	decisions := c.writer(c.DecisionsTopic)
	defer closeLogged(logger, "decisions writer", decisions)

	relay, err := live.NewRelay(live.RelayConfig{Store: store, Redis: rdb, Writer: decisions, Keep: c.RelayKeep, Logger: logger.With("sink", "live"), Registerer: reg})
	if err != nil {
		return err
	}
	kcl := c.cluster.Client(10*time.Second, c.cluster.Transport(nil))
	peerLn, advertise, err := c.peerListener()
	if err != nil {
		return err
	}
	if peerLn != nil {
		defer peerLn.Close()
	}
	var relayLinger time.Duration // the relay's default
	if c.OwnerTakes {
		relayLinger = c.TakesRelayLinger
	}
	takeRelay, err := live.NewTakeRelay(live.TakeRelayConfig{
		Store: store, Redis: rdb, Kafka: kcl, Linger: relayLinger,
		Logger: logger.With("sink", "live"), Registerer: reg,
	})
	if err != nil {
		return err
	}
	liveSink, err := live.NewSink(live.SinkConfig{
		Applier: applier, Group: c.LiveGroup, Rules: watcher.Current, Relay: relay, TakeRelay: takeRelay, EvaluateAll: c.EvaluateAll,
		CheckpointEvery: c.CheckpointInterval, MaxPending: c.MaxPending, Takes: c.takesSink(rdb, kcl, advertise),
		Logger: logger.With("sink", "live"), Registerer: reg,
	})
	if err != nil {
		return err
	}
	takes, err := c.takesServer(liveSink, rdb, store, peerLn, advertise, watcher.Current, reg, logger)
	if err != nil {
		return err
	}
	if takes != nil {
		if err := takes.start(logger); err != nil {
			return err
		}
		defer takes.stop(ctx, logger)
	}
	groups := []*consume.Group{}
	g, err := consume.NewGroup(c.groupConfig(c.LiveGroup, dlq, logger, reg), liveSink)
	if err != nil {
		return err
	}
	groups = append(groups, g)

	if c.History {
		c.HistoryFlags.Registerer = reg
		c.HistoryFlags.Dedup = c.Dedup
		c.HistoryFlags.Rules = watcher.Current
		hsink, closer, err := c.historySink(ctx, logger.With("sink", "history"))
		if err != nil {
			return fmt.Errorf("history sink: %w", err)
		}
		if closer != nil {
			defer closeLogged(logger, "history sink", closer)
		}
		// Only the live group dead-letters, so the DLQ gets each bad
		// message once.
		hg, err := consume.NewGroup(c.groupConfig(c.HistoryGroup, nil, logger, reg), hsink)
		if err != nil {
			return err
		}
		groups = append(groups, hg)
	}

	tasks := []func(context.Context) error{watcher.Run, func(ctx context.Context) error { return parts.Run(ctx, 10*time.Second) }, liveSink.RunTakes}
	for _, grp := range groups {
		tasks = append(tasks, grp.Run)
	}
	return c.serve(ctx, logger, reg, rdb, tasks...)
}

// applier is the live path's Applier as the flags configure it, its
// scripts loaded.
func (c *Config) applier(ctx context.Context, store *window.Store, logger *slog.Logger) (*live.Applier, error) {
	writeBack := c.CheckpointInterval > 0 && !c.EvaluateAll
	if c.CheckpointInterval > 0 && !writeBack {
		logger.Info("write-back off: --evaluate-all writes every batch through")
	}
	var hold, refresh time.Duration
	if writeBack {
		// A held-back decision is written by the next checkpoint: due within
		// the interval, written within a few seconds of it.
		hold, refresh = 2*c.CheckpointInterval+5*time.Second, c.DenyRefresh
	}
	applier, err := live.NewApplier(store, live.ApplierConfig{MaxSubjects: c.MaxSubjects, Dedup: c.Dedup, WriteBack: writeBack, OwnerTakes: c.OwnerTakes,
		CheckpointPart: c.CheckpointPart, HoldDecisions: hold, RefreshDecisions: refresh, Logger: logger.With("sink", "live")})
	if err != nil {
		return nil, err
	}
	if err := store.LoadScripts(ctx); err != nil {
		return nil, err
	}
	if err := applier.LoadScripts(ctx); err != nil {
		return nil, err
	}
	return applier, nil
}

// serve serves metrics and runs tasks (the groups among them) until ctx
// ends or one of them fails; then the groups finish their batches in
// flight and the server stops.
func (c *Config) serve(ctx context.Context, logger *slog.Logger, reg *prometheus.Registry, rdb redis.UniversalClient, tasks ...func(context.Context) error) error {
	ln, err := net.Listen("tcp", c.MetricsAddr)
	if err != nil {
		return fmt.Errorf("metrics listener %s: %w", c.MetricsAddr, err)
	}
	var stopping atomic.Bool
	srv := &http.Server{Handler: c.mux(reg, rdb, &stopping, logger), ReadHeaderTimeout: 5 * time.Second}
	logger.Info("aggregator started", "metrics", "http://"+ln.Addr().String()+"/metrics",
		"topic", c.Topic, "live_group", c.LiveGroup, "history", c.History, "key_prefix", c.KeyPrefix)

	eg, gctx := errgroup.WithContext(ctx)
	eg.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics server: %w", err)
		}
		return nil
	})
	for _, task := range tasks {
		eg.Go(func() error { return task(gctx) })
	}
	eg.Go(func() error {
		<-gctx.Done()
		stopping.Store(true)
		logger.Info("stopping: finishing the batches in flight")
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	err = eg.Wait()
	logger.Info("aggregator stopped", "err", err)
	return err
}

func (c *Config) groupConfig(id string, dlq consume.MessageWriter, logger *slog.Logger, reg prometheus.Registerer) consume.Config {
	return consume.Config{
		Brokers:        c.Brokers,
		Security:       c.cluster.Security,
		Topic:          c.Topic,
		GroupID:        id,
		BatchMax:       c.BatchMax,
		BatchWait:      c.BatchWait,
		ReadAheadBytes: c.ReadAheadBytes,
		MaxFutureSkew:  c.MaxFutureSkew,
		SessionTimeout: c.SessionTimeout,
		CommitInterval: c.CommitInterval,
		OnLostOffsets:  consume.LostOffsetsPolicy(c.OnLostOffsets),
		DeadLetter:     dlq,
		Logger:         logger,
		Registerer:     reg,
	}
}

// writer returns a synchronous writer keyed like the events topic.
func (c *Config) writer(topic string) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(c.Brokers...),
		Transport:    c.cluster.Transport(nil),
		Topic:        topic,
		Balancer:     &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: 5 * time.Millisecond,
		WriteTimeout: 10 * time.Second,
	}
}

// mux serves /metrics and /healthz. A failing health check answers the
// dependency's name only: the listener is open to whatever probes it, and
// Redis's error names addresses; the error goes to the log.
func (c *Config) mux(reg *prometheus.Registry, rdb redis.UniversalClient, stopping *atomic.Bool, logger *slog.Logger) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if stopping.Load() {
			http.Error(w, "stopping", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := rdb.Ping(ctx).Err(); err != nil {
			logger.Warn("health check: redis does not answer", "err", err)
			http.Error(w, "redis unavailable", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

func closeLogged(logger *slog.Logger, what string, c io.Closer) {
	if err := c.Close(); err != nil {
		logger.Warn("close "+what, "err", err)
	}
}

// requireOutputTopics fails the start when the dead-letter or decisions
// topic is missing: writes to them would otherwise retry for ever, and
// decisions would pile up in Redis unpublished, with nothing but WARN logs.
func (c *Config) requireOutputTopics(ctx context.Context) error {
	have, err := topics.PartitionsOn(ctx, c.cluster, c.DLQTopic, c.DecisionsTopic)
	if err != nil {
		return err
	}
	for _, t := range []string{c.DLQTopic, c.DecisionsTopic} {
		if _, ok := have[t]; !ok {
			return fmt.Errorf("topic %s does not exist (create it with `floodgate topics`)", t)
		}
	}
	return nil
}
