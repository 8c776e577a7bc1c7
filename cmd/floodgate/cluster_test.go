package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/kafkatopics"
	"github.com/floodgate-dev/floodgate/internal/stacktest/pacedload"
	"github.com/floodgate-dev/floodgate/internal/stacktest/promtext"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/producer"
)

// The tests of scripts/stack's --cluster profile: three KRaft brokers and a
// Redis Cluster of 3 primaries + 3 replicas. Each runs `floodgate
// aggregator` processes with both paths (live into the Redis Cluster,
// history into Postgres) under paced acks=all load on a 6-partition topic
// with replication factor 3, injects its fault, and then checks, subject by
// subject, that what Kafka holds (read back from the topic) equals the Redis
// window sum and the Postgres total: nothing lost, nothing counted twice.
// Faults are serialised across test processes by stacktest, which restores
// every node when a test ends.

// clusterLoadRate and clusterSubjects shape the paced load: steady enough
// that every fault lands mid-stream on every partition, light enough for a
// 2-core machine running three brokers and six Redis nodes.
const (
	clusterLoadRate = 500 // events/s
	clusterSubjects = 300
	clusterParts    = 6
)

// clusterRules counts action "crash" (countRules) and limits action "hot"
// for the limiter's check.
const clusterRules = countRules + `
  - name: hot
    action: hot
    kinds: [ip]
    limits: [5/1m]
    message: too hot
`

func newClusterEnv(t *testing.T) *liveEnv {
	t.Helper()
	return newEnv(t, envConfig{partitions: clusterParts, rules: clusterRules, cluster: true, history: true})
}

// TestClusterAggregatorsJoinAndLeave runs two aggregator processes in one
// group (both groups, live and history, shared by them), adds a third
// midway and stops the first (SIGTERM) later: every rebalance hands
// partitions over with nothing lost or counted twice.
func TestClusterAggregatorsJoinAndLeave(t *testing.T) {
	e := newClusterEnv(t)
	a, b := e.start("a"), e.start("b")
	load := e.startLoad(t, clusterLoadRate, clusterSubjects)
	e.waitOwns("a", "b")
	e.waitFresh(time.Minute)

	c := e.start("c")
	e.waitOwns("c")
	e.waitFresh(time.Minute)
	t.Log("third aggregator owns partitions")

	a.stop(t)
	e.waitFresh(time.Minute)
	t.Log("first aggregator stopped; its partitions moved")

	tally := load.finish(t)
	e.checkExact(tally, 2*time.Minute)
	b.stop(t)
	c.stop(t)
	e.checkOffsets()
}

// TestClusterAggregatorSIGKILL SIGKILLs one of two aggregator processes
// under load, a few rounds, restarting it at once each time (a new member:
// the killed one's partitions move after the session timeout).
func TestClusterAggregatorSIGKILL(t *testing.T) {
	e := newClusterEnv(t)
	procs := []*proc{e.start("a0"), e.start("b0")}
	load := e.startLoad(t, clusterLoadRate, clusterSubjects)
	e.waitOwns("a0", "b0")
	for round := 1; round <= 3; round++ {
		e.waitFresh(time.Minute)
		i := round % 2
		victim := procs[i]
		victim.kill(t)
		name := fmt.Sprintf("%c%d", "ab"[i], round)
		procs[i] = e.start(name)
		// Events published from now on are applied on every partition:
		// the killed member's partitions were taken over and resumed from
		// the sinks' offsets.
		start := time.Now()
		e.waitFresh(2 * time.Minute)
		t.Logf("round %d: %s SIGKILLed, %s started; all caught up in %v", round, victim.name, name, time.Since(start).Round(time.Millisecond))
	}
	tally := load.finish(t)
	e.checkExact(tally, 2*time.Minute)
	for _, p := range procs {
		p.stop(t)
	}
	e.checkOffsets()
}

// TestClusterRedisFailover moves the slots of some partitions to their
// replica with CLUSTER FAILOVER (no acknowledged write lost) while the
// aggregators apply batches there. A limiter follows the change streams
// throughout: it denies a subject over its limit from memory before the
// failover and a subject of a failed-over partition after it, and is ready.
func TestClusterRedisFailover(t *testing.T) {
	e := newClusterEnv(t)
	e.start("a")
	e.start("b")
	lim := servicetest.Limiter(t, e.bin, servicetest.Stack{
		Brokers: e.brokers, RedisAddr: strings.Join(e.redisAddrs, ","), Topic: e.topic,
		Prefix: e.prefix, Rules: e.rulesPath,
	}, "--no-publish")
	load := e.startLoad(t, clusterLoadRate, clusterSubjects)
	e.waitOwns("a", "b")
	e.waitFresh(time.Minute)

	cc := e.rdb.(*redis.ClusterClient)
	e.waitDenied(lim, "198.51.100.1")
	start := time.Now()
	from, to := stacktest.RedisFailoverOfKey(t, cc, e.store.Keys().Slot(0))
	t.Logf("partitions %v: primary %s failed over to %s in %v", e.partitionsOn(cc, to), from, to, time.Since(start).Round(time.Millisecond))
	e.waitFresh(time.Minute)

	if code, body := httpStatus(t, lim.URL+"/readyz"); code != http.StatusOK {
		t.Fatalf("limiter /readyz after the failover: %d %s", code, body)
	}
	e.waitDenied(lim, e.hotSubject(cc, to))
	if n := scrape(t, lim.URL+"/metrics").Sum("floodgate_limiter_memory_checks_total"); n == 0 {
		t.Fatal("no check answered from memory")
	}

	tally := load.finish(t)
	e.checkExact(tally, 2*time.Minute)
}

// TestClusterRedisPrimaryKill kills (SIGKILL) the primary holding some
// partitions' slots under load. Replication is asynchronous, so a primary
// that dies can take acknowledged writes with it; to make sure this test
// sees that case and not only the lucky one, the replica is cut off
// (SIGSTOP, its replication link closed) until the primary holds batches it
// lacks, then the primary is killed and the replica let go: it takes over
// without those batches (stacktest.KillRedisPrimaryAhead). The
// partitions' offsets live in the same slots as their counters, so both
// roll back together, and the aggregators must replay the partitions from
// the older offsets: the sums end exact. The killed node then rejoins as a
// replica.
func TestClusterRedisPrimaryKill(t *testing.T) {
	e := newClusterEnv(t)
	e.start("a")
	e.start("b")
	load := e.startLoad(t, clusterLoadRate, clusterSubjects)
	e.waitOwns("a", "b")
	e.waitFresh(time.Minute)

	var parts []int
	var acked map[int]int64
	start := time.Now()
	primary, replica := stacktest.KillRedisPrimaryAhead(t, e.store.Keys().Slot(0), func(node *redis.Client) {
		// The replica is cut off: it holds at most what the primary held
		// now. Wait until the primary acknowledged batches of every
		// partition of its slots past that.
		parts = e.partitionsOn(node, node.Options().Addr)
		stalled := e.nodeOffsets(node, parts)
		e.waitNodeOffsets(node, parts, func(now map[int]int64) bool {
			for _, p := range parts {
				if now[p] <= stalled[p] {
					return false
				}
			}
			acked = now
			return true
		})
	})
	// The replica, continued, cannot reach its dead primary: what it holds
	// now is what it will serve once promoted.
	rolled := replicaOffsets(t, replica, e, parts)
	for _, p := range parts {
		t.Logf("partition %d: the killed primary had acknowledged offsets up to %d, its replica holds %d", p, acked[p], rolled[p])
		if rolled[p] >= acked[p] {
			t.Fatalf("partition %d: the replica holds offset %d, not behind the %d the primary acknowledged: nothing was lost, the test proves nothing", p, rolled[p], acked[p])
		}
	}
	stacktest.WaitClusterOK(t)
	t.Logf("primary %s killed ahead of its replica %s; replaced in %v", primary, replica, time.Since(start).Round(time.Millisecond))
	e.waitFresh(2 * time.Minute)
	// write-through reads again from the offset; write-back rebuilds its
	// memory from the checkpoint the replica holds
	if !e.logsContain("reading the partition again from its offset") && !e.logsContain("reads the partition again from its checkpoint") {
		t.Error("no aggregator read a partition again: the lost batches were not replayed")
	}
	stacktest.StartRedisNode(t, portOf(t, primary))
	stacktest.WaitClusterOK(t)

	tally := load.finish(t)
	e.checkExact(tally, 2*time.Minute)
}

// TestClusterOwnerTakesRedisPrimaryKill kills the Redis primary of some
// partitions' take streams while `aggregator --owner-takes` answers takes
// of them, after cutting its replica off until the primary has acknowledged
// appends the replica lacks (as TestClusterRedisPrimaryKill does for
// batches). The owner notices its streams went back and appends again the
// entries no topic holds: no subject is admitted past its limit, each is
// counted exactly its limit in Redis and in the events topic, and what was
// counted beyond the takes admitted is no more than the takes answered
// failed (an append sent to the dying primary may have landed).
func TestClusterOwnerTakesRedisPrimaryKill(t *testing.T) {
	e := newEnv(t, envConfig{partitions: clusterParts, rules: ownerTakeRules, cluster: true})
	// enough subjects that takes go on past the failover
	ownerTakesExact(t, e, 400, func(run *ownerTakesRun) {
		run.failedMayCount = true
		// Not waiting for checkpoints: a partition whose first checkpoint
		// the replica lacks loses its whole slot, and is counted again
		// from the log (consume.Recounter) before its takes reopen.
		stacktest.WaitFor(t, "takes admitted", 90*time.Second, func() bool { return run.total() >= 200 })
		keys := e.store.Keys()
		primary, replica := stacktest.KillRedisPrimaryAhead(t, keys.Slot(0), func(node *redis.Client) {
			parts := e.partitionsOn(node, node.Options().Addr)
			stalled := takeStreamEnds(t, node, e, parts)
			stacktest.WaitFor(t, "appends the cut-off replica lacks", time.Minute, func() bool {
				now := takeStreamEnds(t, node, e, parts)
				for _, p := range parts {
					if !idLess(stalled[p], now[p]) {
						return false
					}
				}
				t.Logf("take streams' last ids on the primary at the cut-off %v, now %v", stalled, now)
				return true
			})
		})
		stacktest.WaitClusterOK(t)
		t.Logf("primary %s killed ahead of its replica %s", primary, replica)
		stacktest.WaitFor(t, "the owner noticing its take streams went back", time.Minute, func() bool {
			return e.logsContain("Redis lost take stream entries it had acknowledged")
		})
		stacktest.WaitFor(t, "the appends in doubt settled", time.Minute, func() bool {
			return e.logsContain("appends in doubt settled")
		})
		if body, err := httpGet(metricsAddr(t, e, "run0")); err == nil {
			var outcomes []string
			for _, o := range []string{"appended_again", "taken_back", "not_appended", "dropped"} {
				outcomes = append(outcomes, fmt.Sprintf("%s %v", o, metricValue(body, "floodgate_live_owner_take_doubts_total", `outcome="`+o+`"`)))
			}
			t.Logf("appends in doubt: %s; partitions recounted (their slot lost whole): %v", strings.Join(outcomes, ", "),
				metricValue(body, "floodgate_aggregator_recounts_total", `group="`+e.group+`"`))
		}
		stacktest.StartRedisNode(t, portOf(t, primary))
		stacktest.WaitClusterOK(t)
	})
}

// takeStreamEnds reads the last generated id of parts' take streams on a
// node ("0-0" for none).
func takeStreamEnds(t *testing.T, node *redis.Client, e *liveEnv, parts []int) map[int]string {
	t.Helper()
	ends := map[int]string{}
	for _, p := range parts {
		info, err := node.XInfoStream(context.Background(), e.store.Keys().Takes(p)).Result()
		switch {
		case err != nil && strings.Contains(err.Error(), "no such key"):
			ends[p] = "0-0"
		case err != nil:
			t.Fatalf("take stream of partition %d: %v", p, err)
		default:
			ends[p] = info.LastGeneratedID
		}
	}
	return ends
}

// idLess orders Redis stream ids.
func idLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	x, _ := strconv.ParseUint(am, 10, 64)
	y, _ := strconv.ParseUint(bm, 10, 64)
	if x != y {
		return x < y
	}
	u, _ := strconv.ParseUint(as, 10, 64)
	v, _ := strconv.ParseUint(bs, 10, 64)
	return u < v
}

// TestClusterKafkaBrokerKill kills (SIGKILL) the broker coordinating the
// live group under load (it leads some partitions too), lets the load and
// both groups go on with two brokers, and restarts it.
func TestClusterKafkaBrokerKill(t *testing.T) {
	e := newClusterEnv(t)
	e.start("a")
	e.start("b")
	load := e.startLoad(t, clusterLoadRate, clusterSubjects)
	e.waitOwns("a", "b")
	e.waitFresh(time.Minute)

	node := e.coordinator()
	start := time.Now()
	stacktest.KillKafkaNode(t, node)
	e.waitFresh(2 * time.Minute)
	t.Logf("%s killed; both groups caught up with two brokers in %v", node, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	stacktest.StartKafkaNode(t, node)
	t.Logf("%s back and caught up in %v", node, time.Since(start).Round(time.Millisecond))
	e.waitFresh(time.Minute)

	tally := load.finish(t)
	e.checkExact(tally, 2*time.Minute)
}

// ---------------------------------------------------------------- load

// pacedLoad publishes events of action "crash" at a steady rate over many
// subjects, with acks=all, until finished.
type pacedLoad struct {
	pub    *producer.Publisher
	cancel context.CancelFunc
	done   chan *pacedload.Tally
}

func (e *liveEnv) startLoad(t *testing.T, rate float64, subjects int) *pacedLoad {
	t.Helper()
	pub, err := producer.New(producer.Config{Brokers: e.brokers, Topic: e.topic, WriteTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &pacedLoad{pub: pub, cancel: cancel, done: make(chan *pacedload.Tally, 1)}
	go func() {
		l.done <- pacedload.Run(ctx, pub, pacedload.Config{Rate: rate, Action: "crash", Kind: "k", SubjectPrefix: "u", Subjects: subjects})
	}()
	t.Cleanup(func() { l.finish(t) })
	return l
}

// finish stops the load and returns what Kafka acknowledged.
func (l *pacedLoad) finish(t *testing.T) *pacedload.Tally {
	t.Helper()
	if l.cancel == nil {
		return nil
	}
	l.cancel()
	l.cancel = nil
	tally := <-l.done
	if err := l.pub.Close(); err != nil {
		t.Errorf("close publisher: %v", err)
	}
	acked, failed := tally.Snapshot()
	t.Logf("load: %d events acknowledged, %d in failed publishes (in doubt: Kafka may hold them)", acked, failed)
	return tally
}

// ---------------------------------------------------------------- waiting

// waitOwns waits until each named aggregator logged that it started a
// partition of the live group: the group is shared.
func (e *liveEnv) waitOwns(names ...string) {
	e.t.Helper()
	// The live group's own line: the history group's members start
	// partitions too, and the live group may still be rebalancing then.
	started := `msg="partition started" group=` + e.group + " "
	for _, name := range names {
		stacktest.WaitFor(e.t, "aggregator "+name+" to own a partition of the live group", time.Minute, func() bool {
			b, _ := os.ReadFile(filepath.Join(e.dir, name+".log"))
			return strings.Contains(string(b), started)
		})
	}
}

// logsContain reports whether any aggregator's log holds s.
func (e *liveEnv) logsContain(s string) bool {
	logs, _ := filepath.Glob(filepath.Join(e.dir, "*.log"))
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil && strings.Contains(string(b), s) {
			return true
		}
	}
	return false
}

// waitPast waits until both groups have applied, on every partition,
// everything the topic held when it was called: whatever happened before,
// the aggregators caught up from it.
func (e *liveEnv) waitPast(timeout time.Duration) {
	e.t.Helper()
	e.waitApplied(timeout, false)
}

// waitFresh is waitPast for events published after it was called, on every
// partition (the load must be running): right after a fault, the topic's
// ends may be applied already, and only later events prove that every
// partition is applied again.
func (e *liveEnv) waitFresh(timeout time.Duration) {
	e.t.Helper()
	e.waitApplied(timeout, true)
}

func (e *liveEnv) waitApplied(timeout time.Duration, fresh bool) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	k := kafkatopics.New(e.brokers)
	var start, target map[int]int64
	last := errors.New("nothing read yet")
	for {
		if target == nil {
			var ends map[int]int64
			if ends, last = k.EndOffsets(ctx, e.topic); last == nil {
				switch {
				case !fresh:
					target = ends
				case start == nil:
					start = ends
				default:
					target = ends
					for p, n := range ends {
						if n <= start[p] {
							target = nil
							last = fmt.Errorf("no event published on partition %d yet", p)
						}
					}
				}
			}
		}
		if target != nil {
			live, hist, err := e.sinkOffsets(ctx)
			if err != nil && ctx.Err() == nil {
				last = err // not the deadline's error: what kept us waiting
			}
			if err != nil {
				// After a primary died, a cluster client keeps asking it
				// until its slot map is reloaded (ClusterRedis).
				if cc, ok := e.rdb.(*redis.ClusterClient); ok {
					cc.ReloadState(ctx)
				}
			} else {
				behind := []string{}
				for p, end := range target {
					if live[p] < end || e.cfg.history && hist[p] < end {
						behind = append(behind, fmt.Sprintf("p%d live %d history %d end %d", p, live[p], hist[p], end))
					}
				}
				if len(behind) == 0 {
					return
				}
				sort.Strings(behind)
				last = errors.New(strings.Join(behind, "; "))
			}
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("aggregators not past the topic's end after %v: %v\nkafka cluster: %s", timeout, last, stacktest.KafkaReplication(e.brokers))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sinkOffsets returns each partition's next offset stored by the live sink
// (Redis) and the history sink (Postgres; nil without history).
func (e *liveEnv) sinkOffsets(ctx context.Context) (live, hist map[int]int64, err error) {
	live = map[int]int64{}
	for p := 0; p < e.partitions; p++ {
		n, _, err := e.store.Resume(ctx, e.group, e.topic, p)
		if err != nil {
			return nil, nil, err
		}
		live[p] = n
	}
	if !e.cfg.history {
		return live, nil, nil
	}
	rows, err := e.pool.Query(ctx, `SELECT "partition", next_offset FROM `+pgx.Identifier{"floodgate", "consumer_offsets"}.Sanitize()+
		` WHERE consumer_group = $1 AND topic = $2`, e.historyGroup, e.topic)
	if err != nil {
		return nil, nil, fmt.Errorf("history offsets: %w", err)
	}
	defer rows.Close()
	hist = map[int]int64{}
	for rows.Next() {
		var p int
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			return nil, nil, fmt.Errorf("history offsets: %w", err)
		}
		hist[p] = n
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("history offsets: %w", err)
	}
	return live, hist, nil
}

// ---------------------------------------------------------------- checking

// checkExact stops nothing: with the load finished, it waits until both
// groups applied everything Kafka holds, reads the topic back (the truth:
// a publish that failed during a fault may still have landed, and every
// acknowledged one must be there) and compares, per subject, the Redis
// 1-day window sum and the Postgres total with it.
func (e *liveEnv) checkExact(tally *pacedload.Tally, timeout time.Duration) {
	e.t.Helper()
	e.waitPast(timeout)
	truth := e.topicCounts("crash")
	var inTopic int64
	subs := make([]string, 0, len(truth))
	for s, n := range truth {
		subs = append(subs, s)
		inTopic += n
	}
	sort.Strings(subs)
	if tally != nil {
		for s, n := range tally.Acked {
			if truth[s] < n {
				e.t.Errorf("subject %s: %d acknowledged by Kafka, %d in the topic: Kafka lost acknowledged events", s, n, truth[s])
			}
		}
	}
	got, err := e.countersOf("crash", subs)
	if err != nil {
		e.t.Fatal(err)
	}
	exact := e.compare("Redis", truth, got)
	if e.cfg.history {
		exact = e.compare("Postgres", truth, e.historyTotals("crash")) && exact
	}
	if exact {
		e.t.Logf("%d events of %d subjects in the topic; Redis and Postgres counted each once", inTopic, len(truth))
	}
}

// compare reports every subject whose count differs from the topic's,
// with the totals lost and counted twice; it returns whether none did.
func (e *liveEnv) compare(where string, truth, got map[string]int64) bool {
	e.t.Helper()
	var lost, dup int64
	var bad []string
	for s, want := range truth {
		if g := got[s]; g != want {
			bad = append(bad, fmt.Sprintf("%s %d/%d", s, g, want))
			lost += max(want-g, 0)
			dup += max(g-want, 0)
		}
	}
	for s, g := range got {
		if _, ok := truth[s]; !ok && g != 0 {
			bad = append(bad, fmt.Sprintf("%s %d/0", s, g))
			dup += g
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		e.t.Errorf("%s: %d events lost, %d counted twice; subjects counted/in topic: %s", where, lost, dup, strings.Join(bad[:min(len(bad), 20)], ", "))
	}
	return len(bad) == 0
}

// topicCounts reads the whole topic back and counts the events of action
// per subject, as the aggregator accepts them.
func (e *liveEnv) topicCounts(action string) map[string]int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := kafkatopics.New(e.brokers)
	end, err := k.EndOffsets(ctx, e.topic)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int64{}
	err = k.ReadRange(ctx, e.topic, map[int]int64{}, end, func(m kafka.Message) {
		ev, err := event.Decode(m.Value)
		if err != nil || ev.Action != action {
			return
		}
		out[ev.Subject] += ev.N
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// historyTotals returns the all-time Postgres total of each subject of
// action.
func (e *liveEnv) historyTotals(action string) map[string]int64 {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT subject, n FROM `+pgx.Identifier{"floodgate", "history_totals"}.Sanitize()+
		` WHERE action = $1`, action)
	if err != nil {
		e.t.Fatalf("history totals: %v", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			e.t.Fatal(err)
		}
		out[s] += n
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// ---------------------------------------------------------------- redis cluster

// partitionsOn returns the partitions whose slots the primary at addr
// serves, as node (any cluster client) sees the cluster.
func (e *liveEnv) partitionsOn(node interface {
	ClusterSlots(context.Context) *redis.ClusterSlotsCmd
	ClusterKeySlot(context.Context, string) *redis.IntCmd
}, addr string) []int {
	e.t.Helper()
	ctx := context.Background()
	slots, err := node.ClusterSlots(ctx).Result()
	if err != nil {
		e.t.Fatalf("cluster slots: %v", err)
	}
	var parts []int
	for p := 0; p < e.partitions; p++ {
		s, err := node.ClusterKeySlot(ctx, e.store.Keys().Slot(p)).Result()
		if err != nil {
			e.t.Fatalf("cluster keyslot: %v", err)
		}
		slot := int(s)
		for _, r := range slots {
			if r.Start <= slot && slot <= r.End && len(r.Nodes) > 0 && r.Nodes[0].Addr == addr {
				parts = append(parts, p)
			}
		}
	}
	return parts
}

// nodeOffsets reads the live group's offsets of parts on one node.
func (e *liveEnv) nodeOffsets(node *redis.Client, parts []int) map[int]int64 {
	e.t.Helper()
	out := map[int]int64{}
	for _, p := range parts {
		n, err := node.Get(context.Background(), e.store.Keys().Offset(e.group, e.topic, p)).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			e.t.Fatalf("offset of partition %d on %s: %v", p, node.Options().Addr, err)
		}
		out[p] = n
	}
	return out
}

// replicaOffsets reads the live group's offsets of parts on the replica at
// addr (READONLY: a replica serves reads of its primary's slots then).
func replicaOffsets(t *testing.T, addr string, e *liveEnv, parts []int) map[int]int64 {
	t.Helper()
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	conn := rc.Conn()
	defer conn.Close()
	if err := conn.ReadOnly(ctx).Err(); err != nil {
		t.Fatalf("READONLY on replica %s: %v", addr, err)
	}
	out := map[int]int64{}
	for _, p := range parts {
		n, err := conn.Get(ctx, e.store.Keys().Offset(e.group, e.topic, p)).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("offset of partition %d on replica %s: %v", p, addr, err)
		}
		out[p] = n
	}
	return out
}

// waitNodeOffsets polls the offsets of parts on node until done says so.
func (e *liveEnv) waitNodeOffsets(node *redis.Client, parts []int, done func(map[int]int64) bool) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !done(e.nodeOffsets(node, parts)) {
		if time.Now().After(deadline) {
			e.t.Fatalf("offsets of partitions %v on %s did not move for 30s", parts, node.Options().Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// ---------------------------------------------------------------- kafka cluster

// coordinator names the cluster node ("kafka-N") coordinating the live
// group.
func (e *liveEnv) coordinator() string {
	e.t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(e.brokers...), Timeout: 10 * time.Second}
	res, err := client.FindCoordinator(context.Background(), &kafka.FindCoordinatorRequest{Key: e.group, KeyType: kafka.CoordinatorKeyTypeConsumer})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		e.t.Fatalf("coordinator of group %s: %v", e.group, err)
	}
	return "kafka-" + strconv.Itoa(int(res.Coordinator.NodeID))
}

// ---------------------------------------------------------------- limiter

// hotSubject returns a subject of action "hot" whose partition's slot is
// held by the primary at addr.
func (e *liveEnv) hotSubject(cc *redis.ClusterClient, addr string) string {
	e.t.Helper()
	for i := 1; i < 255; i++ {
		s := fmt.Sprintf("203.0.113.%d", i)
		p := window.Partition(window.Subject{Action: "hot", Kind: "ip", Subject: s}, e.partitions)
		c, err := cc.MasterForKey(context.Background(), e.store.Keys().Slot(p))
		if err != nil {
			e.t.Fatal(err)
		}
		if c.Options().Addr == addr {
			return s
		}
	}
	e.t.Fatalf("no subject of 203.0.113.0/24 on %s", addr)
	return ""
}

// waitDenied publishes six events of subject (the hot rule allows five a
// minute) and waits until the limiter's check denies it.
func (e *liveEnv) waitDenied(lim *servicetest.Service, subject string) {
	e.t.Helper()
	pub, err := producer.New(producer.Config{Brokers: e.brokers, Topic: e.topic})
	if err != nil {
		e.t.Fatal(err)
	}
	defer pub.Close()
	evs := make([]event.Event, 6)
	for i := range evs {
		evs[i] = event.Event{ID: event.NewID(), Action: "hot", Kind: "ip", Subject: subject, TS: time.Now()}
	}
	if err := pub.Publish(context.Background(), evs...); err != nil {
		e.t.Fatal(err)
	}
	url := lim.URL + "/v1/check?action=hot&ip=" + subject
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := httpStatus(e.t, url)
		if code == http.StatusTooManyRequests {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("check of %s: %d %s, not denied after 30s", subject, code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func httpStatus(tb testing.TB, url string) (int, string) {
	tb.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 512)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return resp.StatusCode, strings.TrimSpace(b.String())
}

func scrape(tb testing.TB, url string) promtext.Sample {
	tb.Helper()
	s, err := promtext.Scrape(context.Background(), url)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
