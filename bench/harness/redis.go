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
	Usec       map[string]int64 // cmdstat_<name> usec: time spent in the command (scripts include what they call)
	UsedMemory int64
	CPU        float64 // used_cpu_user + used_cpu_sys, seconds: everything the server spent
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

// TotalUsec sums the microseconds of the commands named in only. A
// script's EVALSHA includes the commands it calls, which commandstats also
// counts under their own names: name only what clients send.
func (r RedisInfo) TotalUsec(only ...string) int64 {
	var t int64
	for name, n := range r.Usec {
		for _, o := range only {
			if name == o {
				t += n
			}
		}
	}
	return t
}

// ReadRedisInfo runs INFO commandstats and INFO memory.
func ReadRedisInfo(ctx context.Context, rdb *redis.Client) (RedisInfo, error) {
	out := RedisInfo{Calls: map[string]int64{}, Usec: map[string]int64{}}
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
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out.Usec[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	cpu, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return out, fmt.Errorf("redis INFO cpu: %w", err)
	}
	sc = bufio.NewScanner(strings.NewReader(cpu))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				out.CPU += f
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

// CountSubjects scans the live keys of prefix (window.Keys layout:
// "{prefix:pN}:<action>:<kind>:<subject>:<suffix>") and returns the number of
// distinct subjects with keys in Redis.
func CountSubjects(ctx context.Context, rdb *redis.Client, prefix string) (int, error) {
	seen := map[string]struct{}{}
	iter := rdb.Scan(ctx, 0, "{"+prefix+":p*", 1000).Iterator()
	for iter.Next(ctx) {
		if f, ok := subjectOf(iter.Val()); ok {
			seen[f] = struct{}{}
		}
	}
	if err := iter.Err(); err != nil {
		return 0, fmt.Errorf("scan {%s:p*: %w", prefix, err)
	}
	return len(seen), nil
}

// subjectOf is the subject field of a live key: the slot and the key's
// suffix (":s:<n>", ":deny", ":d:<kind>", ...) taken away; partition keys
// ("@...") have none.
func subjectOf(key string) (string, bool) {
	_, rest, ok := strings.Cut(key, "}:")
	if !ok || strings.HasPrefix(rest, "@") {
		return "", false
	}
	parts := strings.Split(rest, ":")
	// action, kind, subject (which may hold ':'), then 1 or 2 suffix parts.
	if len(parts) < 4 {
		return "", false
	}
	switch parts[len(parts)-1] {
	case "deny", "shadow", "g":
		return strings.Join(parts[:len(parts)-1], ":"), true
	}
	return strings.Join(parts[:len(parts)-2], ":"), true
}
