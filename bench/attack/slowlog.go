package attack

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// slowlog records Redis commands slower than 1 ms for a scenario and puts
// the server's setting back afterwards.
type slowlog struct {
	rdb  *redis.Client
	prev string
}

func newSlowlog(ctx context.Context, rdb *redis.Client) (*slowlog, error) {
	cur, err := rdb.ConfigGet(ctx, "slowlog-log-slower-than").Result()
	if err != nil {
		return nil, fmt.Errorf("slowlog: config get: %w", err)
	}
	s := &slowlog{rdb: rdb, prev: cur["slowlog-log-slower-than"]}
	if err := rdb.ConfigSet(ctx, "slowlog-log-slower-than", "1000").Err(); err != nil {
		return nil, fmt.Errorf("slowlog: config set: %w", err)
	}
	if err := rdb.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
		return nil, fmt.Errorf("slowlog: reset: %w", err)
	}
	return s, nil
}

// slowest describes the slowest command recorded since newSlowlog.
func (s *slowlog) slowest(ctx context.Context) (string, error) {
	logs, err := s.rdb.SlowLogGet(ctx, 128).Result()
	if err != nil {
		return "", fmt.Errorf("slowlog: get: %w", err)
	}
	var worst redis.SlowLog
	for _, l := range logs {
		if l.Duration > worst.Duration {
			worst = l
		}
	}
	if worst.Duration == 0 {
		return "under 1 ms", nil
	}
	name := ""
	if len(worst.Args) > 0 {
		name = strings.ToUpper(worst.Args[0])
	}
	return fmt.Sprintf("%s (%s, %d over 1 ms)", worst.Duration.Round(100*time.Microsecond), name, len(logs)), nil
}

// restore puts the server's setting back; a failure leaves Redis logging
// every command over 1 ms, which its operator should hear of.
func (s *slowlog) restore(ctx context.Context, log *slog.Logger) {
	if s.prev == "" {
		return
	}
	if err := s.rdb.ConfigSet(ctx, "slowlog-log-slower-than", s.prev).Err(); err != nil {
		log.Error("attack: slowlog-log-slower-than not restored", "want", s.prev, "err", err)
	}
}
