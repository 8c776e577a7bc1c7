package window

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
	"github.com/floodgate-dev/floodgate/internal/redisconn"
	"github.com/floodgate-dev/floodgate/internal/topics"
)

// Conn is what a process that reads or writes the live slots opens: Redis,
// answering; the Kafka cluster; a Store over Redis whose slots follow the
// events topic's partition count.
type Conn struct {
	Redis redis.UniversalClient
	Kafka kafkaconn.Cluster
	Parts *topics.PartitionCount
	Store *Store
}

// Dial opens them in the order a failed start is clearest in: Redis first
// (pinged, naming the cause), then Kafka. The caller closes the Conn once
// the store's users are done.
func Dial(ctx context.Context, logger *slog.Logger, r *redisconn.Flags, k *topics.Flags, prefix string, reg prometheus.Registerer) (*Conn, error) {
	rdb, err := r.Client()
	if err != nil {
		return nil, err
	}
	c := &Conn{Redis: rdb}
	fail := func(err error) (*Conn, error) {
		if cerr := rdb.Close(); cerr != nil {
			logger.Warn("close redis", "err", cerr)
		}
		return nil, err
	}
	if err := r.Ping(ctx, rdb); err != nil {
		return fail(err)
	}
	if c.Kafka, err = k.KafkaCluster(ctx); err != nil {
		return fail(err)
	}
	if c.Parts, err = topics.NewPartitionCountOn(ctx, c.Kafka, k.Topic, logger); err != nil {
		return fail(err)
	}
	if c.Store, err = NewStore(rdb, StoreConfig{Prefix: prefix, Partitions: c.Parts.Get, Registerer: reg}); err != nil {
		return fail(fmt.Errorf("live store: %w", err))
	}
	return c, nil
}

// Close closes the Redis client.
func (c *Conn) Close() error { return c.Redis.Close() }
