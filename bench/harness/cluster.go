package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterAnswers checks, within 5 seconds, that a broker of the cluster
// profile accepts connections (one is enough: a test may have another down
// on purpose) and that every primary of its Redis Cluster answers a PING.
// The suites run their cluster parts only when it does.
func ClusterAnswers(ctx context.Context, brokers, redisAddrs []string) error {
	if len(brokers) == 0 || len(redisAddrs) == 0 {
		return errors.New("no cluster addresses configured")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var errs []error
	reached := false
	for _, b := range brokers {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", b)
		if err == nil {
			_ = conn.Close()
			reached = true
			break
		}
		errs = append(errs, err)
	}
	if !reached {
		return fmt.Errorf("kafka cluster %s: %w", strings.Join(brokers, ","), errors.Join(errs...))
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redisAddrs})
	defer func() { _ = rdb.Close() }()
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
	if err != nil {
		return fmt.Errorf("redis cluster %s: %w", strings.Join(redisAddrs, ","), err)
	}
	return nil
}
