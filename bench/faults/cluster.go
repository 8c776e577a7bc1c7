package faults

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// The cluster profile's faults (scripts/stack up --cluster): two aggregator
// processes share each group; nodes are killed and restarted through
// scripts/stack, and failovers done with the helpers the tests use
// (stacktest), under the same fault locks, so the suite and a test never
// have two nodes of a kind down at once.

// rewindsMetric counts partitions read again because the live sink lost
// batches it had acknowledged (a Redis primary that died before
// replicating them).
const rewindsMetric = "floodgate_aggregator_rewinds_total"

// clusterSigkill: SIGKILL the older of the two aggregators under load and
// start a new member at once, a few times. The killed member's partitions
// move to the others after the session timeout.
func (s *Suite) clusterSigkill(ctx context.Context) (Row, error) {
	row := Row{Fault: fmt.Sprintf("SIGKILL one of two aggregators ×%d, a new one started at once", s.cfg.Kills)}
	m, err := s.mark(ctx)
	if err != nil {
		return row, err
	}
	stop := s.load(ctx, "ckill")
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	sleep(ctx, 3*time.Second)
	var recs []time.Duration
	for i := 0; i < s.cfg.Kills; i++ {
		start := time.Now()
		s.killAggregator(s.aggs[0])
		if err := s.startAggregator(ctx); err != nil {
			return row, err
		}
		sleep(ctx, 500*time.Millisecond)
		if err := s.waitPast(ctx, 90*time.Second); err != nil {
			return row, fmt.Errorf("kill %d: %w", i+1, err)
		}
		recs = append(recs, time.Since(start))
		sleep(ctx, 1500*time.Millisecond)
	}
	t := stop()
	stop = nil
	if err := s.count(ctx, "ckill", m, t, &row); err != nil {
		return row, err
	}
	row.Recovery = maxDur(recs)
	row.RecoveryNote = "kill → both groups applied all that was in Kafka 0.5 s after the kill (the dead member's partitions move after the 6 s session timeout); worst of " +
		strconv.Itoa(len(recs)) + ": " + durs(recs)
	verdict(&row, false)
	return row, nil
}

// clusterRedisFailover: CLUSTER FAILOVER on the replica of the primary
// serving partition 0's slot: the replica catches up, then takes over; no
// acknowledged write is lost.
func (s *Suite) clusterRedisFailover(ctx context.Context) (Row, error) {
	row := Row{Fault: "Redis primary failover (CLUSTER FAILOVER on its replica)"}
	var note string
	row, err := s.serviceFault(ctx, row, "cfail", func() error {
		release, err := stacktest.LockFaults("redis")
		if err != nil {
			return err
		}
		defer release()
		from, err := stacktest.RedisPrimaryOf(ctx, s.store.Keys().Slot(0))
		if err != nil {
			return err
		}
		parts := s.partitionsOn(ctx, from)
		to, err := stacktest.FailoverRedis(s.rdb.(*redis.ClusterClient), from)
		if err != nil {
			return err
		}
		note = fmt.Sprintf("the slots of partitions %v moved from %s to %s", parts, from, to)
		return nil
	}, false)
	row.Note = joinNotes(note, row.Note)
	return row, err
}

// clusterRedisKill: SIGKILL the primary serving partition 0's slot under
// load; its replica takes over after the node timeout. Whatever the replica
// had not received is lost with the primary, offsets included: the
// partitions replay it. The node is restarted (it rejoins as a replica)
// once the groups caught up.
func (s *Suite) clusterRedisKill(ctx context.Context) (Row, error) {
	row := Row{Fault: "Redis primary kill -9, its replica promoted"}
	release, err := stacktest.LockFaults("redis")
	if err != nil {
		return row, err
	}
	defer release()
	rewinds := s.aggregatorSum(ctx, rewindsMetric)
	var note, killed string
	row, err = s.serviceFault(ctx, row, "ckill9", func() error {
		primary, err := stacktest.RedisPrimaryOf(ctx, s.store.Keys().Slot(0))
		if err != nil {
			return err
		}
		parts := s.partitionsOn(ctx, primary)
		start := time.Now()
		if err := s.stack(ctx, "stop", "--cluster", redisNode(primary), "--kill"); err != nil {
			return err
		}
		killed = primary
		if err := stacktest.WaitRedisHealthy(); err != nil {
			return err
		}
		note = fmt.Sprintf("primary %s of partitions %v killed; its replica served them %s later", primary, parts, time.Since(start).Round(100*time.Millisecond))
		return nil
	}, false)
	row.RecoveryNote = "kill → both groups applied all that was in Kafka 0.5 s after the replica took over"
	row.Note = joinNotes(note, fmt.Sprintf("partitions read again from an older offset (batches the replica lacked): %.0f", s.aggregatorSum(ctx, rewindsMetric)-rewinds), row.Note)
	return row, errors.Join(err, s.restartRedisNode(ctx, killed, &row))
}

// clusterRedisKillBehind is clusterRedisKill when the replica lags: it is
// cut off (stopped, its link closed) until the primary acknowledged
// batches of each of its partitions that the replica never gets, then the
// primary is killed. Those batches are lost with it, offsets and counts
// together, and the aggregators must apply them again.
func (s *Suite) clusterRedisKillBehind(ctx context.Context) (Row, error) {
	row := Row{Fault: "Redis primary kill -9 with acknowledged writes its replica lacks"}
	release, err := stacktest.LockFaults("redis")
	if err != nil {
		return row, err
	}
	defer release()
	rewinds := s.aggregatorSum(ctx, rewindsMetric)
	var note, killed string
	row, err = s.serviceFault(ctx, row, "cbehind", func() error {
		primaryAddr, err := stacktest.RedisPrimaryOf(ctx, s.store.Keys().Slot(0))
		if err != nil {
			return err
		}
		parts := s.partitionsOn(ctx, primaryAddr)
		primary := redis.NewClient(&redis.Options{Addr: primaryAddr})
		defer func() { _ = primary.Close() }()
		replica, resume, err := stacktest.CutOffRedisReplica(ctx, primary)
		if err != nil {
			return err
		}
		resumed := false
		defer func() {
			if !resumed {
				_ = resume()
			}
		}()
		acked, err := s.waitOffsetsMove(ctx, primary, parts)
		if err != nil {
			return err
		}
		start := time.Now()
		if err := s.stack(ctx, "stop", "--cluster", redisNode(primaryAddr), "--kill"); err != nil {
			return err
		}
		killed = primaryAddr
		resumed = true
		if err := resume(); err != nil {
			return err
		}
		// Cut off from its dead primary, the replica holds now what it
		// will serve once promoted.
		rolled, err := s.offsetsOn(ctx, replica, parts, true)
		if err != nil {
			return err
		}
		var lost int64
		var per []string
		for _, p := range parts {
			lost += acked[p] - rolled[p]
			per = append(per, fmt.Sprintf("p%d %d→%d", p, acked[p], rolled[p]))
		}
		if err := stacktest.WaitRedisHealthy(); err != nil {
			return err
		}
		note = fmt.Sprintf("primary %s killed %d offsets or more ahead of its replica %s (acknowledged→held: %s); the replica served them %s later",
			primaryAddr, lost, replica, strings.Join(per, ", "), time.Since(start).Round(100*time.Millisecond))
		return nil
	}, false)
	row.RecoveryNote = "kill → both groups applied all that was in Kafka 0.5 s after the replica took over, the lost batches again included"
	row.Note = joinNotes(note, fmt.Sprintf("partitions read again from the older offset: %.0f", s.aggregatorSum(ctx, rewindsMetric)-rewinds), row.Note)
	return row, errors.Join(err, s.restartRedisNode(ctx, killed, &row))
}

// restartRedisNode starts the killed node at addr again (it rejoins as a
// replica; scripts/stack returns once the cluster is healthy) and notes
// how long that took.
func (s *Suite) restartRedisNode(ctx context.Context, addr string, row *Row) error {
	if addr == "" {
		return nil
	}
	start := time.Now()
	if err := s.stack(ctx, "start", "--cluster", redisNode(addr)); err != nil {
		return err
	}
	row.Note = joinNotes(row.Note, fmt.Sprintf("then %s restarted and rejoined as a replica in %s", addr, time.Since(start).Round(100*time.Millisecond)))
	return nil
}

// clusterKafkaKill: SIGKILL the broker coordinating the live group (it
// leads some partitions too) under acks=all load; the groups and the load
// go on with two brokers; once they caught up the broker is restarted.
func (s *Suite) clusterKafkaKill(ctx context.Context) (Row, error) {
	row := Row{Fault: "Kafka broker kill -9 (the live group's coordinator)"}
	release, err := stacktest.LockFaults("kafka")
	if err != nil {
		return row, err
	}
	defer release()
	var node string
	row, err = s.serviceFault(ctx, row, "ckafka", func() error {
		n, err := s.coordinator(ctx)
		if err != nil {
			return err
		}
		if err := s.stack(ctx, "stop", "--cluster", n, "--kill"); err != nil {
			return err
		}
		node = n
		return nil
	}, false)
	if node == "" {
		return row, err
	}
	row.RecoveryNote = "kill → both groups applied all that was in Kafka 0.5 s after the kill, with two brokers"
	row.Note = joinNotes(node+" killed", row.Note)
	start := time.Now()
	serr := s.stack(ctx, "start", "--cluster", node)
	if serr == nil {
		// The next scenario starts with every replica in sync again.
		serr = stacktest.WaitKafkaReplicated(s.brokers)
	}
	row.Note = joinNotes(row.Note, fmt.Sprintf("then %s restarted and every replica back in sync in %s", node, time.Since(start).Round(100*time.Millisecond)))
	return row, errors.Join(err, serr)
}

// partitionsOn returns the partitions of the topic whose slots the primary
// at addr serves, as the nodes say now.
func (s *Suite) partitionsOn(ctx context.Context, addr string) []int {
	var parts []int
	for p := 0; p < 12; p++ {
		if a, err := stacktest.RedisPrimaryOf(ctx, s.store.Keys().Slot(p)); err == nil && a == addr {
			parts = append(parts, p)
		}
	}
	return parts
}

// offsetsOn reads the live group's offsets of parts on the node at addr;
// readonly reads them on a replica.
func (s *Suite) offsetsOn(ctx context.Context, addr string, parts []int, readonly bool) (map[int]int64, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	conn := c.Conn()
	defer func() { _ = conn.Close() }()
	if readonly {
		if err := conn.ReadOnly(ctx).Err(); err != nil {
			return nil, fmt.Errorf("readonly on %s: %w", addr, err)
		}
	}
	out := map[int]int64{}
	for _, p := range parts {
		n, err := conn.Get(ctx, s.store.Keys().Offset(s.live, s.topic, p)).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("offset of partition %d on %s: %w", p, addr, err)
		}
		out[p] = n
	}
	return out, nil
}

// waitOffsetsMove waits until primary stored, for every partition of parts,
// an offset past the one it holds now, and returns the last offsets read.
func (s *Suite) waitOffsetsMove(ctx context.Context, primary *redis.Client, parts []int) (map[int]int64, error) {
	addr := primary.Options().Addr
	from, err := s.offsetsOn(ctx, addr, parts, false)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		now, err := s.offsetsOn(ctx, addr, parts, false)
		if err != nil {
			return nil, err
		}
		moved := true
		for _, p := range parts {
			moved = moved && now[p] > from[p]
		}
		if moved {
			return now, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("offsets of partitions %v on %s did not all move in 30s: %v → %v", parts, addr, from, now)
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// coordinator names the cluster node ("kafka-N") coordinating the live
// group.
func (s *Suite) coordinator(ctx context.Context) (string, error) {
	client := &kafka.Client{Addr: kafka.TCP(s.brokers...), Timeout: 10 * time.Second}
	res, err := client.FindCoordinator(ctx, &kafka.FindCoordinatorRequest{Key: s.live, KeyType: kafka.CoordinatorKeyTypeConsumer})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		return "", fmt.Errorf("coordinator of group %s: %w", s.live, err)
	}
	return "kafka-" + strconv.Itoa(int(res.Coordinator.NodeID)), nil
}

// redisNode is scripts/stack's name of the cluster node at addr.
func redisNode(addr string) string {
	_, port, _ := strings.Cut(addr, ":")
	return "redis-" + port
}

func joinNotes(notes ...string) string {
	var kept []string
	for _, n := range notes {
		if n = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(n), ".")); n != "" {
			kept = append(kept, n)
		}
	}
	return strings.Join(kept, "; ")
}
