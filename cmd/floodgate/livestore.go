package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"floodgate/kafkaconn"
	"floodgate/topics"
	"floodgate/window"
)

// liveConn is what a command that reads or writes the live slots opens:
// Redis, answering; the Kafka cluster; the store over Redis, its slots
// following the events topic's partition count.
type liveConn struct {
	redis redis.UniversalClient
	kafka kafkaconn.Cluster
	parts *topics.PartitionCount
	store *window.Store
}

// openLive opens them in the order a start-up failure is clearest in:
// Redis first (pinged, naming the cause), then Kafka. The caller closes
// c.redis (close) once the store's users are done.
func openLive(ctx context.Context, logger *slog.Logger, r *RedisFlags, k *KafkaFlags, prefix string, reg prometheus.Registerer) (*liveConn, error) {
	rdb, err := r.redisClient()
	if err != nil {
		return nil, err
	}
	c := &liveConn{redis: rdb}
	if err := r.ping(ctx, rdb); err != nil {
		c.close(logger)
		return nil, err
	}
	if c.kafka, err = k.KafkaCluster(ctx); err != nil {
		c.close(logger)
		return nil, err
	}
	if c.parts, err = topics.NewPartitionCountOn(ctx, c.kafka, k.Topic, logger); err != nil {
		c.close(logger)
		return nil, err
	}
	if c.store, err = window.NewStore(rdb, window.StoreConfig{Prefix: prefix, Partitions: c.parts.Get, Registerer: reg}); err != nil {
		c.close(logger)
		return nil, fmt.Errorf("live store: %w", err)
	}
	return c, nil
}

func (c *liveConn) close(logger *slog.Logger) { closeLogged(logger, "redis", c.redis) }
