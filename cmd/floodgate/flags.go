package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Connection flags shared by subcommands. Embed the ones a subcommand needs;
// defaults point at scripts/stack (see `scripts/stack env`).

// KafkaFlags locate the Kafka cluster and floodgate's topics.
type KafkaFlags struct {
	Brokers        []string `name:"brokers" env:"FLOODGATE_BROKERS" default:"127.0.0.1:19092" sep:"," help:"Kafka bootstrap brokers, comma separated."`
	Topic          string   `name:"topic" env:"FLOODGATE_TOPIC" default:"floodgate.events" help:"Topic of access events."`
	DLQTopic       string   `name:"dlq-topic" env:"FLOODGATE_DLQ_TOPIC" default:"floodgate.events.dlq" help:"Dead-letter topic for malformed events."`
	DecisionsTopic string   `name:"decisions-topic" env:"FLOODGATE_DECISIONS_TOPIC" default:"floodgate.decisions" help:"Topic where new deny decisions are published."`
}

// RedisFlags locate the Redis holding live counters and deny records: one
// server, or a Redis Cluster (several seed addresses, or --redis-cluster).
type RedisFlags struct {
	RedisAddr     []string `name:"redis-addr" env:"FLOODGATE_REDIS_ADDR" default:"127.0.0.1:16379" sep:"," help:"Redis address host:port; several, comma separated, are the seeds of a Redis Cluster."`
	RedisCluster  bool     `name:"redis-cluster" env:"FLOODGATE_REDIS_CLUSTER" help:"Use Redis Cluster even with one seed address."`
	RedisDB       int      `name:"redis-db" env:"FLOODGATE_REDIS_DB" default:"0" help:"Redis database number (single server only)."`
	RedisPoolSize int      `name:"redis-pool-size" env:"FLOODGATE_REDIS_POOL_SIZE" default:"64" help:"Redis connections (per cluster node)."`
}

// redisClient returns a client of the configured topology: *redis.Client
// for one server, *redis.ClusterClient for a cluster. Every call honours its
// context deadline. Commands are never retried: a script whose reply was
// lost may have run (a strict take counted), and running it again would
// count twice; callers retry what is safe to retry themselves.
func (f *RedisFlags) redisClient() redis.UniversalClient {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: f.RedisAddr, IsClusterMode: f.RedisCluster, DB: f.RedisDB, PoolSize: f.RedisPoolSize,
		ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: -1,
	})
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		cc.AddHook(&reloadOnError{cc: cc})
	}
	return rdb
}

// reloadOnError asks a cluster client to reload the slot map after a
// failed call. A primary that dies answers no MOVED (its connections are
// refused), and go-redis otherwise keeps sending its slots to it until its
// periodic reload; the promoted replica is found on the next call instead.
type reloadOnError struct {
	cc   *redis.ClusterClient
	last atomic.Int64 // unix ms of the last reload asked for
}

func (h *reloadOnError) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *reloadOnError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.failed(ctx, err)
		return err
	}
}

func (h *reloadOnError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.failed(ctx, err)
		return err
	}
}

// failed reloads, at most every 100ms, on errors that say the topology
// moved: no reply at all (connection refused, timeouts), or a reply of a
// node that is no longer a primary or not ready.
func (h *reloadOnError) failed(ctx context.Context, err error) {
	if err == nil || errors.Is(err, redis.Nil) {
		return
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && !topologyError(rerr.Error()) {
		return // a script's or a command's own error
	}
	now := time.Now().UnixMilli()
	if last := h.last.Load(); now-last > 100 && h.last.CompareAndSwap(last, now) {
		h.cc.ReloadState(ctx)
	}
}

// ping checks that Redis answers within 5 s (every primary of a cluster).
func (f *RedisFlags) ping(ctx context.Context, rdb redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
	} else {
		err = rdb.Ping(ctx).Err()
	}
	if err != nil {
		return fmt.Errorf("redis %s: %w", strings.Join(f.RedisAddr, ","), err)
	}
	return nil
}

// PostgresFlags locate the PostgreSQL database holding history.
type PostgresFlags struct {
	PostgresURL string `name:"postgres-url" env:"FLOODGATE_POSTGRES_URL" default:"postgres://floodgate@127.0.0.1:15432/floodgate?sslmode=disable" help:"PostgreSQL connection URL."`
}

func topologyError(msg string) bool {
	for _, p := range []string{"CLUSTERDOWN", "TRYAGAIN", "READONLY", "MASTERDOWN", "LOADING"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
