package harness

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisInfo is what the suites read from INFO: total commands processed by
// command (commandstats) and used_memory.
type RedisInfo struct {
	Calls      map[string]int64 // cmdstat_<name> calls
	UsedMemory int64
}

// TotalCalls sums the calls of every command except those named in skip
// (e.g. "info" itself).
func (r RedisInfo) TotalCalls(skip ...string) int64 {
	var t int64
	for name, n := range r.Calls {
		skipped := false
		for _, s := range skip {
			if name == s {
				skipped = true
			}
		}
		if !skipped {
			t += n
		}
	}
	return t
}

// ReadRedisInfo runs INFO commandstats and INFO memory.
func ReadRedisInfo(ctx context.Context, rdb *redis.Client) (RedisInfo, error) {
	out := RedisInfo{Calls: map[string]int64{}}
	cs, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return out, fmt.Errorf("redis INFO commandstats: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(cs))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out.Calls[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	mem, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return out, fmt.Errorf("redis INFO memory: %w", err)
	}
	sc = bufio.NewScanner(strings.NewReader(mem))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "used_memory:"); ok {
			out.UsedMemory, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return out, nil
}

// CountTags scans keys matching prefix+":*" and returns the number of
// distinct hash tags ({...}), i.e. distinct subjects with state in Redis.
func CountTags(ctx context.Context, rdb *redis.Client, prefix string) (int, error) {
	seen := map[string]struct{}{}
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		i := strings.IndexByte(k, '{')
		j := strings.IndexByte(k, '}')
		if i >= 0 && j > i {
			seen[k[i:j+1]] = struct{}{}
		}
	}
	if err := iter.Err(); err != nil {
		return 0, fmt.Errorf("scan %s:*: %w", prefix, err)
	}
	return len(seen), nil
}

// DeletePrefix deletes every key matching prefix+":*".
func DeletePrefix(ctx context.Context, rdb *redis.Client, prefix string) error {
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := rdb.Unlink(ctx, batch...).Err()
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := flush(); err != nil {
				return fmt.Errorf("delete %s:*: %w", prefix, err)
			}
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("scan %s:*: %w", prefix, err)
	}
	if err := flush(); err != nil {
		return fmt.Errorf("delete %s:*: %w", prefix, err)
	}
	return nil
}
