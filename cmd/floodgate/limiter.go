package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"

	"floodgate/feed"
	"floodgate/kafkaconn"
	"floodgate/limiter"
	"floodgate/producer"
	"floodgate/strict"
)

// LimiterCmd serves limiter lookups (default) or measures them.
type LimiterCmd struct {
	Serve LimiterServeCmd `cmd:"" default:"withargs" help:"Serve lookups over Connect/gRPC and HTTP (--http-addr) and Envoy RLS (--rls-addr)."`
}

// LimiterFlags are the decision settings of the limiter.
type LimiterFlags struct {
	RedisFlags
	KeyPrefix    string        `name:"key-prefix" env:"FLOODGATE_KEY_PREFIX" default:"fg" help:"Prefix of every Redis key (as the aggregator's)."`
	RedisTimeout time.Duration `name:"redis-timeout" aliases:"timeout" env:"FLOODGATE_REDIS_TIMEOUT,FLOODGATE_TIMEOUT" default:"50ms" help:"Redis budget of one exact check or take; past it the failure mode answers."`
	FailureMode  string        `name:"failure-mode" env:"FLOODGATE_FAILURE_MODE" default:"open" enum:"open,closed" help:"Answer when Redis fails or is slow: open (allow) or closed (deny)."`
	TakeBatch    int           `name:"take-batch" env:"FLOODGATE_TAKE_BATCH" default:"64" help:"Most concurrent strict takes of one Redis slot run in one script."`
}

// LimiterServeCmd serves the three surfaces.
type LimiterServeCmd struct {
	RLSFlags
	LimiterFlags
	KafkaFlags
	AdminFlags
	ListenTLSFlags

	Rules         string `name:"rules" env:"FLOODGATE_RULES" default:"examples/rules.yaml" help:"Rules file (YAML); reloaded on SIGHUP and on change."`
	HTTPAddr      string `name:"http-addr" env:"FLOODGATE_HTTP_ADDR" default:"127.0.0.1:8080" help:"Connect/gRPC (h2c), /v1/check, /v1/take, /healthz, /readyz, /metrics."`
	RLSAddr       string `name:"rls-addr" env:"FLOODGATE_RLS_ADDR" default:"127.0.0.1:8081" help:"Envoy RateLimitService (gRPC); \"off\" disables."`
	RLSMode       string `name:"rls-mode" env:"FLOODGATE_RLS_MODE" default:"check" enum:"check,take" help:"Envoy calls only check (the app publishes events) or take (check and count)."`
	AuthToken     string `name:"auth-token" env:"FLOODGATE_AUTH_TOKEN" help:"Bearer token required on RPC and /v1/* (empty: no auth). Prefer --auth-token-file."`
	AuthTokenFile string `name:"auth-token-file" env:"FLOODGATE_AUTH_TOKEN_FILE" help:"File holding the bearer token (wins over --auth-token)."`
	MaxBytes      int64  `name:"max-request-bytes" env:"FLOODGATE_MAX_REQUEST_BYTES" default:"65536" help:"Largest request body or RPC message."`
	MaxStreams    uint32 `name:"max-concurrent-streams" env:"FLOODGATE_MAX_CONCURRENT_STREAMS" default:"250" help:"Most calls in flight on one HTTP/2 connection (RLS and Connect/gRPC); past it a client waits or opens another connection."`
	// Each held subject costs about 0.3 KiB (docs/limiter.md, "Memory"):
	// the default keeps the state near 60 MiB however many subjects an
	// attacker brings.
	StateMaxSubjects int  `name:"state-max-subjects" env:"FLOODGATE_STATE_MAX_SUBJECTS" default:"200000" help:"Most subjects held in memory; past it, checks of subjects not held read Redis (exact) until the states left out expire. 0: no bound."`
	NoPublish        bool `name:"no-publish" env:"FLOODGATE_NO_PUBLISH" help:"Take does not publish events to Kafka (no history; only strict subjects are counted)."`
	// The metrics name the rules; a scraper can send the token.
	MetricsAuth bool `name:"metrics-auth" env:"FLOODGATE_METRICS_AUTH" help:"Require --auth-token on /metrics too (default: /metrics is open)."`
	// A take's answer never waits for Kafka (the publisher is
	// asynchronous), so a longer linger costs only delivery delay, and it
	// is what keeps the broker cheap: a partition's batch is one produce
	// request, and at 5 ms each of 12 partitions sends ~200 of them a second
	// under load (the broker then used more CPU than Redis and the limiter
	// together; docs/profiles.md, "A strict take").
	PublishLinger time.Duration `name:"publish-linger" env:"FLOODGATE_PUBLISH_LINGER" default:"50ms" help:"How long a take's events may wait to share a Kafka produce request with others (delivery delay, not answer latency)."`
}

// Run serves until ctx ends, then drains requests in flight.
func (c *LimiterServeCmd) Run(ctx context.Context, logger *slog.Logger) error {
	reg := newRegistry()
	authToken, serverTLS, err := c.access(logger)
	if err != nil {
		return err
	}
	watcher, err := watchRules(c.Rules, logger, reg)
	if err != nil {
		return err
	}

	lc, err := openLive(ctx, logger, &c.RedisFlags, &c.KafkaFlags, c.KeyPrefix, reg)
	if err != nil {
		return err
	}
	defer lc.close(logger)
	rdb, kc, parts, store := lc.redis, lc.kafka, lc.parts, lc.store
	if err := store.LoadScripts(ctx); err != nil {
		return err
	}
	taker, err := strict.New(strict.Config{Store: store, MaxBatch: c.TakeBatch, Timeout: max(c.RedisTimeout, 250*time.Millisecond), Logger: logger})
	if err != nil {
		return err
	}
	feedMetrics, err := feed.NewMetrics(reg, "floodgate_limiter_feed")
	if err != nil {
		return err
	}
	if c.StateMaxSubjects < 0 {
		return fmt.Errorf("--state-max-subjects %d is negative", c.StateMaxSubjects)
	}
	state := limiter.NewBoundedState(c.StateMaxSubjects)
	pub, err := c.publisher(kc, logger)
	if err != nil {
		return err
	}
	var lpub limiter.Publisher // nil, not a nil *Publisher, with --no-publish
	if pub != nil {
		defer closeLogged(logger, "producer", pub)
		lpub = pub
	}
	mode, err := limiter.ParseFailureMode(c.FailureMode)
	if err != nil {
		return err
	}
	lim, err := limiter.New(limiter.Config{
		Store: store, Taker: taker, State: state, Partitions: parts.Get, Rules: watcher.Current, Publisher: lpub,
		Timeout: c.RedisTimeout, FailureMode: mode, Logger: logger, Registerer: reg,
	})
	if err != nil {
		return err
	}
	rlsMode, err := limiter.ParseRLSMode(c.RLSMode)
	if err != nil {
		return err
	}
	srv, err := limiter.NewServer(limiter.ServerConfig{
		RLSMaxConnectionAge: c.rlsMaxConnAge(), RLSMaxConnectionAgeGrace: c.RLSMaxConnAgeGrace, RLSNoOKHeaders: !c.RLSOKHeaders,
		Limiter: lim, HTTPAddr: c.HTTPAddr, RLSAddr: c.RLSAddr, RLSMode: rlsMode,
		AuthToken: authToken, MetricsAuth: c.MetricsAuth, MaxRequestBytes: c.MaxBytes, MaxConcurrentStreams: c.MaxStreams,
		TLS: serverTLS, Gatherer: reg, Logger: logger,
	})
	if err != nil {
		return err
	}
	admin, err := c.admin(authToken, serverTLS, c.Topic, store, watcher.Current, lim, state, reg, logger)
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	if err := admin.Start(); err != nil {
		return errors.Join(err, srv.Shutdown(ctx))
	}
	logger.Info("limiter started", "http", srv.HTTPAddr(), "rls", srv.RLSAddr(),
		"key_prefix", c.KeyPrefix, "redis_timeout", c.RedisTimeout, "failure_mode", c.FailureMode, "auth", authToken != "", "tls", serverTLS != nil)

	err = runUntilDone(ctx, srv, admin,
		watcher.Run,
		func(ctx context.Context) error { return parts.Run(ctx, 10*time.Second) },
		func(ctx context.Context) error {
			return limiter.Sync(ctx, limiter.SyncConfig{
				State: state, Source: store, Streams: rdb, Partitions: parts.Get, Metrics: feedMetrics, Logger: logger,
			})
		})
	logger.Info("limiter stopped", "err", err)
	return err
}

// runUntilDone runs tasks beside the started servers until ctx ends or
// one of them fails, then shuts the servers down.
func runUntilDone(ctx context.Context, srv *limiter.Server, admin *adminServer, tasks ...func(context.Context) error) error {
	eg, gctx := errgroup.WithContext(ctx)
	for _, task := range tasks {
		eg.Go(func() error { return task(gctx) })
	}
	eg.Go(func() error {
		select {
		case <-gctx.Done():
			return nil
		case err := <-srv.Err():
			return err
		}
	})
	eg.Go(func() error { return admin.Wait(gctx) })
	err := eg.Wait()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return errors.Join(err, srv.Shutdown(sctx), admin.Shutdown(sctx))
}

// access is the limiter's token and TLS; it warns when the limiter
// listens beyond loopback with no token.
func (c *LimiterServeCmd) access(logger *slog.Logger) (token string, tlsCfg *tls.Config, err error) {
	token, err = secret("auth-token", c.AuthToken, c.AuthTokenFile)
	if err != nil {
		return "", nil, err
	}
	tlsCfg, err = c.serverTLS(logger)
	if err != nil {
		return "", nil, err
	}
	if token == "" && (beyondLoopback(c.HTTPAddr) || c.RLSAddr != "off" && beyondLoopback(c.RLSAddr)) {
		logger.Warn("the limiter listens beyond loopback without a token: anyone who reaches it may check and take; set --auth-token-file",
			"http", c.HTTPAddr, "rls", c.RLSAddr)
	}
	return token, tlsCfg, nil
}

// publisher is the limiter's asynchronous publisher of the events it
// counts; nil with --no-publish.
func (c *LimiterServeCmd) publisher(kc kafkaconn.Cluster, logger *slog.Logger) (*producer.Publisher, error) {
	if c.NoPublish {
		return nil, nil
	}
	return producer.New(producer.Config{
		Brokers: c.Brokers, Security: kc.Security, Topic: c.Topic, Async: true, NonBlocking: true, BatchTimeout: c.PublishLinger,
		Logger: logger.With("component", "producer"),
	})
}
