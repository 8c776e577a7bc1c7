package stacktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
)

// The stack's addresses (scripts/stack env).
const (
	DefaultBrokers     = "127.0.0.1:19092"
	DefaultRedisAddr   = "127.0.0.1:16379"
	DefaultPostgresURL = "postgres://floodgate@127.0.0.1:15432/floodgate?sslmode=disable"
)

// probeTimeout bounds each check that a service answers.
const probeTimeout = 5 * time.Second

// unavailable ends the test because service at addr did not answer: a
// failure, or a skip under -short when CI is not "true".
func unavailable(tb testing.TB, service, addr string, err error) {
	tb.Helper()
	msg := fmt.Sprintf("%s at %s does not answer: %v (start it with scripts/stack up)", service, addr, err)
	if testing.Short() && os.Getenv("CI") != "true" {
		tb.Skip(msg + "; skipped under -short")
	}
	tb.Fatal(msg)
}

// Brokers returns FLOODGATE_BROKERS (comma-separated) or DefaultBrokers,
// after checking that the first broker accepts connections.
func Brokers(tb testing.TB) []string {
	tb.Helper()
	brokers := strings.Split(DefaultBrokers, ",")
	if v := os.Getenv("FLOODGATE_BROKERS"); v != "" {
		brokers = strings.Split(v, ",")
	}
	conn, err := net.DialTimeout("tcp", brokers[0], probeTimeout)
	if err != nil {
		unavailable(tb, "Kafka", brokers[0], err)
	}
	_ = conn.Close()
	return brokers
}

// RedisAddr returns FLOODGATE_REDIS_ADDR or DefaultRedisAddr. It does not
// check that Redis answers: Redis does.
func RedisAddr() string {
	if a := os.Getenv("FLOODGATE_REDIS_ADDR"); a != "" {
		return a
	}
	return DefaultRedisAddr
}

// Redis returns a client of the stack's Redis that answered a PING. It is
// closed when the test ends.
func Redis(tb testing.TB) *redis.Client {
	tb.Helper()
	addr := RedisAddr()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		unavailable(tb, "Redis", addr, err)
	}
	tb.Cleanup(func() {
		if err := rdb.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			tb.Errorf("close redis client %s: %v", addr, err)
		}
	})
	return rdb
}

var seq atomic.Int64

// unique returns a name made of tb.Name() (lower case, runs of anything
// but letters and digits as one '-', at most 60 characters), this process
// and a sequence number.
func unique(tb testing.TB) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(tb.Name()) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= 60 {
			break
		}
	}
	name := strings.TrimSuffix(b.String(), "-")
	if name == "" {
		name = "test"
	}
	return name + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-" + strconv.FormatInt(seq.Add(1), 10)
}

// Prefix returns a Redis key prefix of this test's own ("fgtest-" and a
// unique name, safe in a SCAN pattern). Its keys, prefix:*, are deleted when
// the test ends.
func Prefix(tb testing.TB, rdb *redis.Client) string {
	tb.Helper()
	p := "fgtest-" + unique(tb)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := DeletePrefix(ctx, rdb, p); err != nil {
			tb.Errorf("clean up redis keys %s:*: %v", p, err)
		}
	})
	return p
}

// DeletePrefix deletes the keys prefix:* (SCAN, then UNLINK in batches).
func DeletePrefix(ctx context.Context, rdb *redis.Client, prefix string) error {
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	keys := make([]string, 0, 500)
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		err := rdb.Unlink(ctx, keys...).Err()
		keys = keys[:0]
		return err
	}
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == cap(keys) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}

// PostgresURL returns FLOODGATE_POSTGRES_URL or DefaultPostgresURL, after
// checking that the database accepts a connection and answers a ping.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("FLOODGATE_POSTGRES_URL")
	if u == "" {
		u = DefaultPostgresURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err == nil {
		err = conn.Ping(ctx)
		_ = conn.Close(context.Background())
	}
	if err != nil {
		shown := u
		if pu, perr := url.Parse(u); perr == nil {
			shown = pu.Redacted() // no password in test logs
		}
		unavailable(tb, "PostgreSQL", shown, err)
	}
	return u
}

// Topic creates a topic of this test's own with the given partitions, waits
// until every partition has a leader, and deletes it when the test ends.
// Creation is retried for a while: tests that restart the broker share it.
func Topic(tb testing.TB, brokers []string, partitions int) string {
	tb.Helper()
	name := "fgtest." + unique(tb)
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var err error
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		var res *kafka.CreateTopicsResponse
		res, err = client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{
			{Topic: name, NumPartitions: partitions, ReplicationFactor: 1}}})
		if err == nil {
			err = res.Errors[name]
		}
		if err == nil || errors.Is(err, kafka.TopicAlreadyExists) { // a retry after a create that went through
			err = nil
			break
		}
		if !sleep(ctx, delay) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("Kafka at %s: create topic %s: %v", strings.Join(brokers, ","), name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{name}})
		if err == nil {
			err = res.Errors[name]
		}
		if err != nil && !errors.Is(err, kafka.UnknownTopicOrPartition) {
			tb.Logf("delete topic %s: %v", name, err)
		}
	})

	// Wait until metadata shows every partition with a leader.
	last := "no metadata yet"
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		if last = notReady(ctx, client, name, partitions); last == "" {
			return name
		}
		if !sleep(ctx, delay) {
			tb.Fatalf("Kafka at %s: topic %s not ready: %s", strings.Join(brokers, ","), name, last)
		}
	}
}

// notReady says why topic is not ready yet, or returns "".
func notReady(ctx context.Context, client *kafka.Client, topic string, partitions int) string {
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return err.Error()
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return t.Error.Error()
		}
		if len(t.Partitions) < partitions {
			return fmt.Sprintf("%d of %d partitions in metadata", len(t.Partitions), partitions)
		}
		for _, p := range t.Partitions {
			if p.Error != nil || p.Leader.Host == "" {
				return fmt.Sprintf("partition %d has no leader yet", p.ID)
			}
		}
		return ""
	}
	return "not in metadata"
}

// sleep waits d, or returns false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// RedisCalls sums the calls of every command in INFO commandstats, commands
// run by scripts included, so its delta over a benchmark is the Redis work
// done. The stack's Redis is shared: benchmark while nothing else uses it.
func RedisCalls(tb testing.TB, rdb *redis.Client) int64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("redis INFO commandstats: %v", err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		_, stats, _ := strings.Cut(line, ":")
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				total += n
			}
		}
	}
	return total
}

// Nginx returns the path of Debian's nginx (scripts/stack up installs it),
// for tests that run it as a private process in front of a service.
func Nginx(tb testing.TB) string {
	tb.Helper()
	return program(tb, "nginx", "/usr/sbin/nginx")
}

// Chromium returns the path of Debian's chromium (scripts/stack up installs
// it), for tests that load pages in a headless browser.
func Chromium(tb testing.TB) string {
	tb.Helper()
	return program(tb, "Chromium", "chromium", "/usr/bin/chromium")
}

// program finds the first of names on PATH (or as an absolute path): a
// missing program is a missing service, failed or skipped by the same rule.
func program(tb testing.TB, what string, names ...string) string {
	tb.Helper()
	var err error
	for _, n := range names {
		var p string
		if p, err = exec.LookPath(n); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("%s is not installed (%v); install it with scripts/stack up", what, err)
	if testing.Short() && os.Getenv("CI") != "true" {
		tb.Skip(msg + "; skipped under -short")
	}
	tb.Fatal(msg)
	return ""
}
