package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"floodgate/limiter"
	"floodgate/producer"
	"floodgate/rules"
	"floodgate/window"
)

// LimiterCmd serves limiter lookups (default) or measures them.
type LimiterCmd struct {
	Serve LimiterServeCmd `cmd:"" default:"withargs" help:"Serve lookups over Connect/gRPC and HTTP (--http-addr) and Envoy RLS (--rls-addr)."`
}

// LimiterFlags are the decision settings shared by serve and bench.
type LimiterFlags struct {
	RedisFlags
	KeyPrefix     string        `name:"key-prefix" env:"FLOODGATE_KEY_PREFIX" default:"fg" help:"Prefix of every Redis key (as the aggregator's)."`
	Timeout       time.Duration `name:"timeout" env:"FLOODGATE_TIMEOUT" default:"50ms" help:"Redis budget of one decision; past it the failure mode answers."`
	FailureMode   string        `name:"failure-mode" env:"FLOODGATE_FAILURE_MODE" default:"open" enum:"open,closed" help:"Answer when Redis fails or is slow: open (allow) or closed (deny)."`
	CacheSize     int           `name:"cache-size" env:"FLOODGATE_CACHE_SIZE" default:"100000" help:"Deny decisions cached in process until they expire (negative disables)."`
	CacheTTL      time.Duration `name:"cache-ttl" env:"FLOODGATE_CACHE_TTL" default:"10s" help:"Longest a cached denial is used before Redis is asked again (an operator's unban shows within it)."`
	RedisPoolSize int           `name:"redis-pool-size" env:"FLOODGATE_REDIS_POOL_SIZE" default:"64" help:"Redis connections."`
}

// redis returns a client whose every call honours its context deadline, so
// the limiter's timeout holds against a slow or dead Redis.
func (f *LimiterFlags) redis() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: f.RedisAddr, DB: f.RedisDB, PoolSize: f.RedisPoolSize,
		ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: 1,
	})
}

func (f *LimiterFlags) limiterConfig(store limiter.Store, set func() *rules.Set, pub limiter.Publisher, logger *slog.Logger, reg prometheus.Registerer) (limiter.Config, error) {
	mode, err := limiter.ParseFailureMode(f.FailureMode)
	if err != nil {
		return limiter.Config{}, err
	}
	cfg := limiter.Config{
		Store: store, Rules: set, Timeout: f.Timeout, FailureMode: mode, CacheSize: f.CacheSize, CacheTTL: f.CacheTTL,
		Logger: logger, Registerer: reg,
	}
	if pub != nil {
		cfg.Publisher = pub
	}
	return cfg, nil
}

// LimiterServeCmd serves the three surfaces.
type LimiterServeCmd struct {
	LimiterFlags
	KafkaFlags

	Rules     string `name:"rules" env:"FLOODGATE_RULES" default:"examples/rules.yaml" help:"Rules file (YAML); reloaded on SIGHUP and on change."`
	HTTPAddr  string `name:"http-addr" env:"FLOODGATE_HTTP_ADDR" default:"127.0.0.1:8080" help:"Connect/gRPC (h2c), /v1/check, /v1/take, /healthz, /readyz, /metrics."`
	RLSAddr   string `name:"rls-addr" env:"FLOODGATE_RLS_ADDR" default:"127.0.0.1:8081" help:"Envoy RateLimitService (gRPC); \"off\" disables."`
	RLSMode   string `name:"rls-mode" env:"FLOODGATE_RLS_MODE" default:"check" enum:"check,take" help:"Envoy calls only check (the app publishes events) or take (check and count)."`
	AuthToken string `name:"auth-token" env:"FLOODGATE_AUTH_TOKEN" help:"Bearer token required on RPC and /v1/* (empty: no auth)."`
	MaxBytes  int64  `name:"max-request-bytes" env:"FLOODGATE_MAX_REQUEST_BYTES" default:"65536" help:"Largest request body or RPC message."`
	NoPublish bool   `name:"no-publish" env:"FLOODGATE_NO_PUBLISH" help:"Take does not publish events to Kafka (no history; only strict subjects are counted)."`
}

// Run serves until ctx ends, then drains requests in flight.
func (c *LimiterServeCmd) Run(ctx context.Context, logger *slog.Logger) error {
	reg := newRegistry()
	watcher, err := watchRules(c.Rules, logger, reg)
	if err != nil {
		return err
	}

	rdb := c.redis()
	defer closeLogged(logger, "redis", rdb)
	store, err := window.NewStore(rdb, window.StoreConfig{Prefix: c.KeyPrefix, Registerer: reg})
	if err != nil {
		return err
	}
	var pub *producer.Publisher
	if !c.NoPublish {
		pub, err = producer.New(producer.Config{
			Brokers: c.Brokers, Topic: c.Topic, Async: true, NonBlocking: true,
			Logger: logger.With("component", "producer"),
		})
		if err != nil {
			return err
		}
		defer closeLogged(logger, "producer", pub)
	}
	var lpub limiter.Publisher
	if pub != nil {
		lpub = pub
	}
	lcfg, err := c.limiterConfig(store, watcher.Current, lpub, logger, reg)
	if err != nil {
		return err
	}
	lim, err := limiter.New(lcfg)
	if err != nil {
		return err
	}
	rlsMode, err := limiter.ParseRLSMode(c.RLSMode)
	if err != nil {
		return err
	}
	srv, err := limiter.NewServer(limiter.ServerConfig{
		Limiter: lim, HTTPAddr: c.HTTPAddr, RLSAddr: c.RLSAddr, RLSMode: rlsMode,
		AuthToken: c.AuthToken, MaxRequestBytes: c.MaxBytes, Gatherer: reg, Logger: logger,
	})
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	logger.Info("limiter started", "http", srv.HTTPAddr(), "rls", srv.RLSAddr(),
		"key_prefix", c.KeyPrefix, "timeout", c.Timeout, "failure_mode", c.FailureMode, "auth", c.AuthToken != "")

	eg, gctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return watcher.Run(gctx) })
	eg.Go(func() error {
		select {
		case <-gctx.Done():
			return nil
		case err := <-srv.Err():
			return err
		}
	})
	err = eg.Wait()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = errors.Join(err, srv.Shutdown(sctx))
	logger.Info("limiter stopped", "err", err)
	return err
}
