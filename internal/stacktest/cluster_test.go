package stacktest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// TestClusterTopicSurvivesBrokerKill writes with acks=all to a partition
// whose leader was killed (the other two replicas satisfy
// min.insync.replicas=2), restarts it, and reads every message back.
func TestClusterTopicSurvivesBrokerKill(t *testing.T) {
	brokers := stacktest.ClusterBrokers(t)
	topic := stacktest.ClusterTopic(t, brokers, 1)
	// A transport of our own: the default one caches metadata for 6 s, and
	// the partition's leader moves.
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second,
		Transport: &kafka.Transport{MetadataTTL: 500 * time.Millisecond}}

	produce(t, client, topic, "before")
	leader := leaderOf(t, client, topic)
	stacktest.KillKafkaNode(t, fmt.Sprintf("kafka-%d", leader)) // may wait for another test's fault
	start := time.Now()
	produce(t, client, topic, "during")
	if now := leaderOf(t, client, topic); now == leader {
		t.Fatalf("leader still %d after it was killed", leader)
	}
	t.Logf("acks=all write accepted %v after leader kafka-%d was killed", time.Since(start).Round(time.Millisecond), leader)
	start = time.Now()
	stacktest.StartKafkaNode(t, fmt.Sprintf("kafka-%d", leader))
	t.Logf("kafka-%d restarted and caught up in %v", leader, time.Since(start).Round(time.Millisecond))
	produce(t, client, topic, "after")

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: 0, MaxWait: 500 * time.Millisecond})
	defer func() {
		if err := r.Close(); err != nil {
			t.Errorf("close reader: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// produce retries a write whose answer it did not get, which Kafka may
	// have taken (another test killing a node makes that likely): a value
	// may repeat, but none may be missing or out of order.
	var got []string
	for len(got) == 0 || got[len(got)-1] != "after" {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read %s after %q: %v", topic, got, err)
		}
		if v := string(m.Value); len(got) == 0 || got[len(got)-1] != v {
			got = append(got, v)
		} else {
			t.Logf("offset %d: %q again, a retried write", m.Offset, v)
		}
	}
	if strings.Join(got, ",") != "before,during,after" {
		t.Fatalf("read %q, want before, during, after", got)
	}
}

// produce writes value to partition 0 with acks=all, retrying until the
// partition has a leader that accepts it (it moves when one is killed).
func produce(t *testing.T, client *kafka.Client, topic, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		res, err := client.Produce(ctx, &kafka.ProduceRequest{
			Topic: topic, Partition: 0, RequiredAcks: kafka.RequireAll,
			Records: kafka.NewRecordReader(kafka.Record{Value: kafka.NewBytes([]byte(value))}),
		})
		if err == nil {
			err = res.Error
		}
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("produce %q to %s with acks=all: %v", value, topic, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func leaderOf(t *testing.T, client *kafka.Client, topic string) int {
	t.Helper()
	md, err := client.Metadata(context.Background(), &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	for _, tp := range md.Topics {
		for _, p := range tp.Partitions {
			if tp.Name == topic && p.ID == 0 && p.Leader.Host != "" {
				return p.Leader.ID
			}
		}
	}
	t.Fatalf("%s/0 has no leader", topic)
	return 0
}

// TestRedisFailover moves a key's slot to the replica and reads the key
// from the new primary.
func TestRedisFailover(t *testing.T) {
	rdb := stacktest.ClusterRedis(t)
	key := "{" + stacktest.ClusterPrefix(t, rdb) + ":p1}:k"
	ctx := context.Background()
	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("set %s: %v", key, err)
	}
	old := masterOf(t, rdb, key)
	addr := stacktest.RedisFailover(t, rdb, old)
	if got := masterOf(t, rdb, key); got != addr {
		t.Fatalf("primary of %s: %s, want the former replica %s", key, got, addr)
	}
	if got, err := rdb.Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("get %s after failover from %s to %s: %q, %v", key, old, addr, got, err)
	}
}

// TestRedisNodeKill kills the primary of a key that reached its replica,
// waits for the replica to take over, reads the key, and restarts the node.
func TestRedisNodeKill(t *testing.T) {
	rdb := stacktest.ClusterRedis(t)
	key := "{" + stacktest.ClusterPrefix(t, rdb) + ":p2}:k"
	ctx := context.Background()
	primary, err := rdb.MasterForKey(ctx, key)
	if err != nil {
		t.Fatalf("primary of %s: %v", key, err)
	}
	// WAIT on the connection of the SET: the replica has the key before
	// the kill.
	conn := primary.Conn()
	err = conn.Set(ctx, key, "v", 0).Err()
	var acked int64
	if err == nil {
		acked, err = conn.Wait(ctx, 1, 5*time.Second).Result()
	}
	if cerr := conn.Close(); err == nil {
		err = cerr
	}
	if err != nil || acked < 1 {
		t.Fatalf("set %s on %s and wait for a replica: %d replicas, %v", key, primary.Options().Addr, acked, err)
	}
	_, portText, _ := net.SplitHostPort(primary.Options().Addr)
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatalf("port of %s: %v", primary.Options().Addr, err)
	}

	start := time.Now()
	stacktest.KillRedisNode(t, port)
	stacktest.WaitClusterOK(t)
	t.Logf("killed primary %s replaced in %v", primary.Options().Addr, time.Since(start).Round(time.Millisecond))
	// go-redis keeps routing the slot to the dead primary (a refused dial
	// brings no MOVED reply) until its slot map is reloaded, on its own
	// only every ClusterStateReloadInterval (60 s): reload on errors.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := rdb.Get(ctx, key).Result()
		if err == nil && got == "v" {
			break
		}
		if err == nil || errors.Is(err, redis.Nil) || time.Now().After(deadline) {
			t.Fatalf("get %s after its primary %s was killed: %q, %v", key, primary.Options().Addr, got, err)
		}
		rdb.ReloadState(ctx)
		time.Sleep(100 * time.Millisecond)
	}
	start = time.Now()
	stacktest.StartRedisNode(t, port)
	stacktest.WaitClusterOK(t)
	t.Logf("%s rejoined in %v", primary.Options().Addr, time.Since(start).Round(time.Millisecond))
}

func masterOf(t *testing.T, rdb *redis.ClusterClient, key string) string {
	t.Helper()
	c, err := rdb.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatalf("primary of %s: %v", key, err)
	}
	return c.Options().Addr
}

// TestDeletePrefixLayouts deletes keys with and without a leading hash tag
// from the single Redis and from the cluster, and nothing else.
func TestDeletePrefixLayouts(t *testing.T) {
	for name, rdb := range map[string]redis.UniversalClient{
		"single":  stacktest.Redis(t),
		"cluster": stacktest.ClusterRedis(t),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			p := "fgtest-deleteprefix-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			gone := []string{p + ":a", "{" + p + ":p0}:b", "{" + p + ":p7}:c", "{" + p + "}:d"}
			kept := []string{p + "x:e", "{" + p + "x}:f"}
			for _, k := range append(gone, kept...) {
				if err := rdb.Set(ctx, k, "1", time.Minute).Err(); err != nil {
					t.Fatalf("set %s: %v", k, err)
				}
			}
			t.Cleanup(func() {
				for _, k := range kept {
					_ = rdb.Del(context.Background(), k).Err()
				}
			})
			if err := stacktest.DeletePrefix(ctx, rdb, p); err != nil {
				t.Fatalf("DeletePrefix %s: %v", p, err)
			}
			for _, k := range gone {
				if n := rdb.Exists(ctx, k).Val(); n != 0 {
					t.Errorf("%s still exists", k)
				}
			}
			for _, k := range kept {
				if n := rdb.Exists(ctx, k).Val(); n != 1 {
					t.Errorf("%s was deleted", k)
				}
			}
		})
	}
}
