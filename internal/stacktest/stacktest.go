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
	unavailableStart(tb, service, addr, "scripts/stack up", err)
}

// unavailableStart is unavailable naming the command that starts service.
func unavailableStart(tb testing.TB, service, addr, start string, err error) {
	tb.Helper()
	msg := fmt.Sprintf("%s at %s does not answer: %v (start it with %s)", service, addr, err, start)
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
// check that Redis answers: Redis does. Several addresses are a cluster's
// seeds (`scripts/stack env --cluster`), not a single node's: then it is
// DefaultRedisAddr, and the cluster is ClusterRedis's.
func RedisAddr() string {
	if a := os.Getenv("FLOODGATE_REDIS_ADDR"); a != "" && !strings.Contains(a, ",") {
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
// unique name, safe in a SCAN pattern). Its keys are deleted when the test
// ends (see DeletePrefix).
func Prefix(tb testing.TB, rdb *redis.Client) string {
	tb.Helper()
	return prefix(tb, rdb)
}

func prefix(tb testing.TB, rdb Keyspace) string {
	p := "fgtest-" + unique(tb)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := DeletePrefix(ctx, rdb, p); err != nil {
			tb.Errorf("clean up redis keys of prefix %s: %v", p, err)
		}
	})
	return p
}

// Keyspace is what DeletePrefix needs of a Redis client: *redis.Client and
// *redis.ClusterClient have it.
type Keyspace interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

var (
	_ Keyspace = (*redis.Client)(nil)
	_ Keyspace = (*redis.ClusterClient)(nil)
)

// masterWalker is how DeletePrefix recognises a cluster client: a SCAN sent
// through one reaches a single node, so each primary is scanned.
type masterWalker interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, node *redis.Client) error) error
}

var _ masterWalker = (*redis.ClusterClient)(nil)

// DeletePrefix deletes the keys of prefix in both layouts: prefix:* and,
// with the hash tag first as cluster keys have it, {prefix:* and {prefix}*.
// On a cluster client every primary is scanned.
func DeletePrefix(ctx context.Context, rdb Keyspace, prefix string) error {
	if c, ok := rdb.(masterWalker); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return deleteScanned(ctx, node, rdb, prefix)
		})
	}
	return deleteScanned(ctx, rdb, rdb, prefix)
}

// deleteScanned SCANs node for the keys of prefix and UNLINKs them through
// rdb, one key per command in pipelines of 500: in a cluster, keys of
// different slots cannot share a command, and rdb follows a slot that
// moved since node was listed.
func deleteScanned(ctx context.Context, node, rdb Keyspace, prefix string) error {
	keys := make([]string, 0, 500)
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.Unlink(ctx, k)
			}
			return nil
		})
		keys = keys[:0]
		return err
	}
	// [:}] matches either character: {prefix:...}... and {prefix}...
	for _, match := range []string{prefix + ":*", "{" + prefix + "[:}]*"} {
		iter := node.Scan(ctx, 0, match, 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
			if len(keys) == cap(keys) {
				if err := flush(); err != nil {
					return fmt.Errorf("unlink keys %s: %w", match, err)
				}
			}
		}
		if err := iter.Err(); err != nil {
			return fmt.Errorf("scan %s: %w", match, err)
		}
		if err := flush(); err != nil {
			return fmt.Errorf("unlink keys %s: %w", match, err)
		}
	}
	return nil
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
	return topic(tb, brokers, kafka.TopicConfig{NumPartitions: partitions, ReplicationFactor: 1}, 1)
}

// topic creates a topic of cfg (its name set here) and waits until every
// partition has a leader and isr in-sync replicas.
func topic(tb testing.TB, brokers []string, cfg kafka.TopicConfig, isr int) string {
	tb.Helper()
	name := "fgtest." + unique(tb)
	cfg.Topic = name
	partitions := cfg.NumPartitions
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var err error
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		var res *kafka.CreateTopicsResponse
		res, err = client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{cfg}})
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

	// Wait until metadata shows every partition with a leader and its ISR.
	last := "no metadata yet"
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		if last = notReady(ctx, client, name, partitions, isr); last == "" {
			return name
		}
		if !sleep(ctx, delay) {
			tb.Fatalf("Kafka at %s: topic %s not ready: %s", strings.Join(brokers, ","), name, last)
		}
	}
}

// notReady says why topic is not ready yet (a partition without a leader,
// or with fewer than isr in-sync replicas), or returns "".
func notReady(ctx context.Context, client *kafka.Client, topic string, partitions, isr int) string {
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
			if len(p.Isr) < isr {
				return fmt.Sprintf("partition %d has %d of %d replicas in sync", p.ID, len(p.Isr), isr)
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

// Promtool returns the path of Prometheus's promtool (Debian's prometheus,
// which scripts/stack up installs), for tests of the alert rules.
func Promtool(tb testing.TB) string {
	tb.Helper()
	return program(tb, "promtool", "promtool")
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

// WaitFor polls cond every few milliseconds until it holds, and fails the
// test when it still does not after timeout: tests wait on conditions, not
// on sleeps.
func WaitFor(tb testing.TB, what string, timeout time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
