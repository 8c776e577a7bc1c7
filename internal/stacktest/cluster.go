package stacktest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
)

// The cluster profile's addresses (scripts/stack env --cluster).
const (
	DefaultClusterBrokers    = "127.0.0.1:29092,127.0.0.1:29192,127.0.0.1:29292"
	DefaultClusterRedisAddrs = "127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005,127.0.0.1:17006"
)

// clusterStart is what the failure messages tell to run.
const clusterStart = "scripts/stack up --cluster"

// clusterWait bounds each wait for the cluster to heal: a Redis failover
// takes a few seconds, a Kafka node's restart and catch-up tens of seconds
// on a busy machine.
const clusterWait = 2 * time.Minute

// ClusterBrokers returns FLOODGATE_CLUSTER_BROKERS (comma-separated) or
// DefaultClusterBrokers, after checking that one of them accepts
// connections (not all: another test may have one down on purpose).
func ClusterBrokers(tb testing.TB) []string {
	tb.Helper()
	brokers := strings.Split(DefaultClusterBrokers, ",")
	if v := os.Getenv("FLOODGATE_CLUSTER_BROKERS"); v != "" {
		brokers = strings.Split(v, ",")
	}
	var errs []error
	for _, b := range brokers {
		conn, err := net.DialTimeout("tcp", b, probeTimeout)
		if err == nil {
			_ = conn.Close()
			return brokers
		}
		errs = append(errs, err)
	}
	unavailableStart(tb, "Kafka cluster", strings.Join(brokers, ","), clusterStart, errors.Join(errs...))
	return nil
}

// ClusterRedisAddrs returns FLOODGATE_CLUSTER_REDIS_ADDRS (comma-separated)
// or DefaultClusterRedisAddrs: the Redis Cluster's seed nodes.
func ClusterRedisAddrs() []string {
	if v := os.Getenv("FLOODGATE_CLUSTER_REDIS_ADDRS"); v != "" {
		return strings.Split(v, ",")
	}
	return strings.Split(DefaultClusterRedisAddrs, ",")
}

// ClusterRedis returns a client of the stack's Redis Cluster whose every
// node (primaries and replicas) answered a PING. It is closed when the test
// ends.
//
// Its options are go-redis's defaults, as production code would have them,
// and so is its blind spot: after a primary is killed the client keeps
// sending that primary's slots to it (a refused connection brings no MOVED
// reply) until it reloads its slot map, by itself only every
// ClusterStateReloadInterval (60 s). Call ReloadState when commands fail.
func ClusterRedis(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	addrs := ClusterRedisAddrs()
	// Every node must answer, and a node another test process killed does
	// not until that test starts it again (each package's tests run in a
	// process of their own, at once): wait for its fault to end.
	if err := waitFaults("redis"); err != nil {
		tb.Fatal(err)
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	err := rdb.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		if err := node.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("ping %s: %w", node.Options().Addr, err)
		}
		return nil
	})
	if err != nil {
		_ = rdb.Close()
		unavailableStart(tb, "Redis Cluster", strings.Join(addrs, ","), clusterStart, err)
	}
	tb.Cleanup(func() {
		if err := rdb.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			tb.Errorf("close redis cluster client %s: %v", strings.Join(addrs, ","), err)
		}
	})
	return rdb
}

// ClusterPrefix returns a Redis key prefix of this test's own, as Prefix
// does; its keys are deleted from every primary when the test ends, both
// prefix:* and those with the hash tag first ({prefix:p3}:...).
func ClusterPrefix(tb testing.TB, rdb *redis.ClusterClient) string {
	tb.Helper()
	return prefix(tb, rdb)
}

// ClusterTopic creates a topic of this test's own on the cluster with the
// given partitions, replication factor 3 and min.insync.replicas=2, waits
// until every partition has a leader and 3 in-sync replicas, and deletes it
// when the test ends.
func ClusterTopic(tb testing.TB, brokers []string, partitions int) string {
	tb.Helper()
	return topic(tb, brokers, kafka.TopicConfig{
		NumPartitions:     partitions,
		ReplicationFactor: 3,
		ConfigEntries:     []kafka.ConfigEntry{{ConfigName: "min.insync.replicas", ConfigValue: "2"}},
	}, 3)
}

// ---------------------------------------------------------------- faults

// KillKafkaNode kills Kafka node name ("kafka-1", "kafka-2" or "kafka-3")
// with SIGKILL through scripts/stack. The cluster survives one node down,
// not two, so kills are serialised across tests and test processes: this
// waits until no other test that killed a Kafka node is running, and until
// every partition is in sync. The node is restarted when the test ends if
// StartKafkaNode was not called. A test kills at most one Kafka node: a
// second kill would wait for the lock the test itself holds.
func KillKafkaNode(tb testing.TB, name string) {
	tb.Helper()
	kill(tb, "kafka", name)
}

// StartKafkaNode starts Kafka node name again through scripts/stack, which
// returns once every running node lists it, and waits until no partition
// of any topic is under-replicated.
func StartKafkaNode(tb testing.TB, name string) {
	tb.Helper()
	if err := startNode(name); err != nil {
		tb.Fatal(err)
	}
}

// KillRedisNode kills the Redis Cluster node on port (17001 to 17006) with
// SIGKILL through scripts/stack; serialised and restarted at the end of the
// test as KillKafkaNode is. A killed primary's replica takes over after the
// node timeout (1.5 s): WaitClusterOK waits for that.
func KillRedisNode(tb testing.TB, port int) {
	tb.Helper()
	kill(tb, "redis", redisNode(port))
}

// StartRedisNode starts the Redis Cluster node on port again through
// scripts/stack, which returns once it rejoined (as a replica, if its
// replica took over) and the cluster is healthy.
func StartRedisNode(tb testing.TB, port int) {
	tb.Helper()
	if err := startNode(redisNode(port)); err != nil {
		tb.Fatal(err)
	}
}

func redisNode(port int) string { return "redis-" + strconv.Itoa(port) }

// KillRedisPrimaryAhead kills (SIGKILL) the Redis Cluster primary serving
// key's slot while it holds writes its replica lacks, as asynchronous
// replication allows: the replica is cut off (CutOffRedisReplica), ahead is
// called with a client of the primary and returns once the primary took
// the writes the test wants lost, then the primary is killed and the
// replica continued; it takes over without them after the node timeout
// (WaitClusterOK waits for that). It returns both addresses. The primary is
// found once this holds the fault lock (another test's failover may have
// moved the slot); the replica is continued whatever happens; the primary
// is restarted at the end of the test as with KillRedisNode.
func KillRedisPrimaryAhead(tb testing.TB, key string, ahead func(primary *redis.Client)) (primaryAddr, replicaAddr string) {
	tb.Helper()
	lock, err := lockFaults("redis")
	if err != nil {
		tb.Fatal(err)
	}
	locked := true
	defer func() {
		if locked {
			unlock(lock)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	primaryAddr, err = RedisPrimaryOf(ctx, key)
	if err != nil {
		tb.Fatal(err)
	}
	primary := redis.NewClient(&redis.Options{Addr: primaryAddr})
	defer func() { _ = primary.Close() }()
	replicaAddr, resume, err := CutOffRedisReplica(ctx, primary)
	if err != nil {
		tb.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			if err := resume(); err != nil {
				tb.Error(err)
			}
		}
	}()
	ahead(primary)
	locked = false
	killLocked(tb, lock, redisNode(portOf(primaryAddr)))
	resumed = true
	if err := resume(); err != nil {
		tb.Fatal(err)
	}
	return primaryAddr, replicaAddr
}

// RedisFailoverOfKey is RedisFailover of the primary serving key's slot,
// found once this holds the fault lock (another test's fault may have moved
// the slot meanwhile). It returns the old and the new primary's addresses.
func RedisFailoverOfKey(tb testing.TB, rdb *redis.ClusterClient, key string) (from, to string) {
	tb.Helper()
	lock, err := lockFaults("redis")
	if err != nil {
		tb.Fatal(err)
	}
	defer unlock(lock)
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	from, err = RedisPrimaryOf(ctx, key)
	cancel()
	if err != nil {
		tb.Fatal(err)
	}
	to, err = FailoverRedis(rdb, from)
	if err != nil {
		tb.Fatalf("redis failover of %s: %v", from, err)
	}
	return from, to
}

// ---------------------------------------------------------------- for harnesses

// The functions below return errors instead of failing a test: the chaos
// suite (bench/faults), which injects the same faults outside go test,
// uses them, and takes the same fault locks.

// LockFaults takes the fault lock of kind ("kafka" or "redis") that the
// kill helpers of tests take, so that a harness and a test never have
// nodes of one kind down at once; release frees it.
func LockFaults(kind string) (release func(), err error) {
	f, err := lockFaults(kind)
	if err != nil {
		return nil, err
	}
	return func() { unlock(f) }, nil
}

// RedisPrimaryOf returns the address of the primary serving key's slot as
// the nodes say now (a client's slot map may be stale), once that node
// confirms it is a primary.
func RedisPrimaryOf(ctx context.Context, key string) (string, error) {
	nodes := nodeClients()
	defer closeAll(nodes)
	var errs []error
	for addr, c := range nodes {
		slot, err := c.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: cluster keyslot: %w", addr, err))
			continue
		}
		slots, err := c.ClusterSlots(ctx).Result()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: cluster slots: %w", addr, err))
			continue
		}
		for _, r := range slots {
			if int64(r.Start) > slot || slot > int64(r.End) || len(r.Nodes) == 0 {
				continue
			}
			p := nodes[r.Nodes[0].Addr]
			if p == nil {
				errs = append(errs, fmt.Errorf("%s names %s, not a seed node, as the primary of slot %d", addr, r.Nodes[0].Addr, slot))
				break
			}
			if role, err := p.Do(ctx, "ROLE").Slice(); err == nil && len(role) > 0 && role[0] == "master" {
				return r.Nodes[0].Addr, nil
			}
			errs = append(errs, fmt.Errorf("%s names %s as the primary of slot %d, which is not one now", addr, r.Nodes[0].Addr, slot))
			break
		}
	}
	return "", fmt.Errorf("primary of key %s: %w", key, errors.Join(errs...))
}

// CutOffRedisReplica stops (SIGSTOP) the replica of primary and closes
// its replication link, so that the writes primary takes from now on reach
// no replica: stopped, the replica cannot reconnect, and what the primary
// had sent before sits in its socket buffer. resume continues it (SIGCONT);
// call it in every case.
func CutOffRedisReplica(ctx context.Context, primary *redis.Client) (replicaAddr string, resume func() error, err error) {
	replicaAddr, err = replicaOf(ctx, primary)
	if err != nil {
		return "", nil, err
	}
	pid, err := redisPID(portOf(replicaAddr))
	if err != nil {
		return "", nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return "", nil, fmt.Errorf("stop replica %s (pid %d): %w", replicaAddr, pid, err)
	}
	resume = func() error {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			return fmt.Errorf("continue replica %s (pid %d): %w", replicaAddr, pid, err)
		}
		return nil
	}
	if err := primary.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		return "", nil, errors.Join(fmt.Errorf("close the replication link of %s: %w", primary.Options().Addr, err), resume())
	}
	return replicaAddr, resume, nil
}

// WaitRedisHealthy is WaitClusterOK returning an error.
func WaitRedisHealthy() error { return waitClusterOK() }

// WaitKafkaReplicated waits until every partition of every topic of the
// cluster has all its replicas in sync (a restarted node caught up), as
// StartKafkaNode does.
func WaitKafkaReplicated(brokers []string) error { return waitReplicated(brokers) }

// portOf returns the port of a host:port address (0 when it has none).
func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// redisPID returns the pid of the cluster's Redis node on port, from
// scripts/stack's pid file, after checking that it is that node's
// redis-server.
func redisPID(port int) (int, error) {
	dir, err := stackDir()
	if err != nil {
		return 0, err
	}
	path := filepath.Join(dir, "cluster", redisNode(port), "redis.pid")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("pid of redis node %d: %w", port, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %w", path, err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "redis-server") || !strings.Contains(string(cmdline), ":"+strconv.Itoa(port)) {
		return 0, fmt.Errorf("pid %d of %s is not redis node %d (%q, %v)", pid, path, port, cmdline, err)
	}
	return pid, nil
}

// killed holds the fault of each node killed by this process, with its
// kind's fault lock.
var killed sync.Map // node name → *fault

type fault struct {
	lock *os.File
	down bool // not started again yet
}

func kill(tb testing.TB, kind, name string) {
	tb.Helper()
	lock, err := lockFaults(kind)
	if err != nil {
		tb.Fatal(err)
	}
	// A Kafka node restarted by another test process may still be out of
	// some ISRs: killing a second node then leaves partitions (the group
	// coordinator's among them) below min.insync.replicas, a double fault
	// no test means to cause.
	if kind == "kafka" {
		if err := waitReplicated(strings.Split(DefaultClusterBrokers, ",")); err != nil {
			unlock(lock)
			tb.Fatal(err)
		}
	}
	killLocked(tb, lock, name)
}

// killLocked kills node name holding its kind's fault lock. A Redis node
// keeps the lock until it is started again; a Kafka node until the test
// ends, because the test goes on through the cluster once the node is back
// and another test's kill would fail it with errors no single fault
// causes. Should the test not start the node again, it is started when the
// test ends.
func killLocked(tb testing.TB, lock *os.File, name string) {
	tb.Helper()
	if _, err := stack("stop", "--cluster", name, "--kill"); err != nil {
		unlock(lock)
		tb.Fatal(err)
	}
	f := &fault{lock: lock, down: true}
	killed.Store(name, f)
	tb.Cleanup(func() {
		if f.down {
			if err := startNode(name); err != nil {
				tb.Errorf("restart %s after the test: %v", name, err)
			}
		}
		if _, ok := killed.LoadAndDelete(name); ok {
			unlock(f.lock)
		}
	})
}

// startNode starts node name; a Kafka node once it is back in every ISR
// (the script returns once it is registered). It releases a Redis node's
// fault lock if this process killed it.
func startNode(name string) error {
	if _, err := stack("start", "--cluster", name); err != nil {
		return err
	}
	v, ok := killed.Load(name)
	if ok {
		v.(*fault).down = false
	}
	if strings.HasPrefix(name, "kafka-") {
		return waitReplicated(strings.Split(DefaultClusterBrokers, ","))
	}
	if ok && killed.CompareAndDelete(name, v) {
		unlock(v.(*fault).lock)
	}
	return nil
}

// lockFaults takes the fault lock of kind ("kafka" or "redis"), a file
// lock under the stack directory so that test processes of several
// packages share it.
func lockFaults(kind string) (*os.File, error) {
	dir, err := stackDir()
	if err != nil {
		return nil, err
	}
	dir = filepath.Join(dir, "cluster")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fault lock: %w", err)
	}
	path := filepath.Join(dir, "faults-"+kind+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("fault lock: %w", err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			heldFaults.Store(f, kind)
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("fault lock %s: %w", path, err)
		}
		time.Sleep(200 * time.Millisecond) // another test has a node down
	}
}

// unlock releases a fault lock (closing the file releases the flock).
func unlock(f *os.File) {
	heldFaults.Delete(f)
	_ = f.Close()
}

// heldFaults are the fault locks this process holds, with their kinds.
var heldFaults sync.Map // *os.File → kind

// waitFaults returns once no other test process has a node of kind down
// (none holds its fault lock). A test that holds the lock itself has its
// own fault in progress and does not wait for it: a second flock from this
// process would wait for ever.
func waitFaults(kind string) error {
	mine := false
	heldFaults.Range(func(_, k any) bool {
		mine = k == kind
		return !mine
	})
	if mine {
		return nil
	}
	f, err := lockFaults(kind)
	if err != nil {
		return err
	}
	unlock(f)
	return nil
}

// stack runs scripts/stack with args and returns its output.
func stack(args ...string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "stack"), args...)
	cmd.Dir = root
	// The script's services are started detached with their output in
	// files; should one still hold our pipe, do not wait for it forever.
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("scripts/stack %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// moduleRoot is the directory of go.mod, found upward from the working
// directory (a package's directory under go test).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find module root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find module root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// stackDir is scripts/stack's state directory.
func stackDir() (string, error) {
	if d := os.Getenv("FLOODGATE_STACK_DIR"); d != "" {
		return d, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".stack"), nil
}

// waitReplicated waits until every partition of every topic has all its
// replicas in sync (a restarted node has caught up).
func waitReplicated(brokers []string) error {
	if v := os.Getenv("FLOODGATE_CLUSTER_BROKERS"); v != "" {
		brokers = strings.Split(v, ",")
	}
	// A transport of our own: the default one caches metadata for 6 s.
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second,
		Transport: &kafka.Transport{MetadataTTL: time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	last := "no metadata yet"
	for {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{})
		if err != nil {
			last = err.Error()
		} else if last = underReplicated(md); last == "" {
			return nil
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return fmt.Errorf("kafka cluster %s: not fully replicated after %v: %s", strings.Join(brokers, ","), clusterWait, last)
		}
	}
}

// KafkaReplication describes, for a failing test's log, every partition of
// the cluster that lacks a leader or has replicas out of sync (the group
// coordinators' __consumer_offsets among them), or says all are in sync.
func KafkaReplication(brokers []string) string {
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second,
		Transport: &kafka.Transport{MetadataTTL: time.Second}}
	md, err := client.Metadata(context.Background(), &kafka.MetadataRequest{})
	if err != nil {
		return "metadata: " + err.Error()
	}
	var bad []string
	for _, t := range md.Topics {
		for _, p := range t.Partitions {
			leader := p.Leader.ID
			if p.Leader.Host == "" {
				leader = -1 // kafka-go reports no leader as an empty broker
			}
			if leader < 0 || len(p.Isr) < len(p.Replicas) {
				bad = append(bad, fmt.Sprintf("%s/%d leader %d isr %v", t.Name, p.ID, leader, brokerIDs(p.Isr)))
			}
		}
	}
	if len(bad) == 0 {
		return fmt.Sprintf("every partition of %d topics in sync", len(md.Topics))
	}
	return strings.Join(bad, "; ")
}

func brokerIDs(bs []kafka.Broker) []int {
	ids := make([]int, len(bs))
	for i, b := range bs {
		ids[i] = b.ID
	}
	return ids
}

// underReplicated names a partition with fewer in-sync replicas than
// replicas, or returns "".
func underReplicated(md *kafka.MetadataResponse) string {
	for _, t := range md.Topics {
		for _, p := range t.Partitions {
			if len(p.Isr) < len(p.Replicas) {
				return fmt.Sprintf("%s/%d has %d of %d replicas in sync", t.Name, p.ID, len(p.Isr), len(p.Replicas))
			}
		}
	}
	return ""
}

// ---------------------------------------------------------------- redis cluster state

// WaitClusterOK waits until the Redis Cluster serves every slot from a
// primary that answers: each node that answers says cluster_state:ok with
// all 16384 slots ok, and no primary holding slots is down or flagged as
// failing. Right after KillRedisNode of a primary this waits for its
// replica to take over (the surviving nodes still count the dead primary's
// slots as ok until the node timeout passed).
func WaitClusterOK(tb testing.TB) {
	tb.Helper()
	if err := waitClusterOK(); err != nil {
		tb.Fatal(err)
	}
}

func waitClusterOK() error {
	nodes := nodeClients()
	defer closeAll(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	for {
		why := clusterNotOK(ctx, nodes)
		if why == "" {
			return nil
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return fmt.Errorf("redis cluster %s: not ok after %v: %s", strings.Join(ClusterRedisAddrs(), ","), clusterWait, why)
		}
	}
}

// nodeClients returns a client of each seed node, by address.
func nodeClients() map[string]*redis.Client {
	addrs := ClusterRedisAddrs()
	nodes := make(map[string]*redis.Client, len(addrs))
	for _, a := range addrs {
		// No retries and short timeouts: a node that does not answer is
		// what is looked for.
		nodes[a] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	}
	return nodes
}

func closeAll(nodes map[string]*redis.Client) {
	for _, c := range nodes {
		_ = c.Close()
	}
}

// clusterNotOK says why the cluster is not ok (see WaitClusterOK), or "".
func clusterNotOK(ctx context.Context, nodes map[string]*redis.Client) string {
	alive := map[string]bool{}
	for a, c := range nodes {
		alive[a] = c.Ping(ctx).Err() == nil
	}
	answered := false
	for a, c := range nodes {
		if !alive[a] {
			continue
		}
		answered = true
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Sprintf("%s: cluster info: %v", a, err)
		}
		for _, want := range []string{"cluster_state:ok", "cluster_slots_ok:16384"} {
			if !strings.Contains(info, want+"\r\n") {
				return fmt.Sprintf("%s: no %s", a, want)
			}
		}
		view, err := c.ClusterNodes(ctx).Result()
		if err != nil {
			return fmt.Sprintf("%s: cluster nodes: %v", a, err)
		}
		for _, n := range parseNodes(view) {
			if n.primary && n.slots && (n.failing || !alive[n.addr]) {
				return fmt.Sprintf("%s sees primary %s with slots as down or failing", a, n.addr)
			}
		}
	}
	if !answered {
		return "no node answers"
	}
	return ""
}

// node is one line of CLUSTER NODES.
type node struct {
	id, addr, primaryID string
	primary, failing    bool
	connected, slots    bool
}

// parseNodes reads CLUSTER NODES: id addr@bus flags primary-id ping pong
// epoch link slot...
func parseNodes(text string) []node {
	var ns []node
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		ns = append(ns, node{
			id: f[0], addr: addr, primaryID: f[3],
			primary:   strings.Contains(f[2], "master"),
			failing:   strings.Contains(f[2], "fail"),
			connected: f[7] == "connected" || strings.Contains(f[2], "myself"),
			slots:     len(f) > 8,
		})
	}
	return ns
}

// RedisFailover makes a replica of the primary at primaryAddr take its
// place (CLUSTER FAILOVER on the replica: no write is lost), waits until the
// roles switched, the cluster is ok and rdb's view has the new primary, and
// returns the new primary's address. Serialised with KillRedisNode.
func RedisFailover(tb testing.TB, rdb *redis.ClusterClient, primaryAddr string) string {
	tb.Helper()
	lock, err := lockFaults("redis")
	if err != nil {
		tb.Fatal(err)
	}
	defer unlock(lock)
	addr, err := FailoverRedis(rdb, primaryAddr)
	if err != nil {
		tb.Fatalf("redis failover of %s: %v", primaryAddr, err)
	}
	return addr
}

// FailoverRedis is RedisFailover without the fault lock, returning an
// error.
func FailoverRedis(rdb *redis.ClusterClient, primaryAddr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), clusterWait)
	defer cancel()
	primary := redis.NewClient(&redis.Options{Addr: primaryAddr})
	defer func() { _ = primary.Close() }()
	replicaAddr, err := replicaOf(ctx, primary)
	if err != nil {
		return "", err
	}
	replica := redis.NewClient(&redis.Options{Addr: replicaAddr})
	defer func() { _ = replica.Close() }()
	nodes := nodeClients()
	defer closeAll(nodes)

	// A manual failover gives up after 5 s when the replica cannot catch
	// up in time; it is asked again then.
	var asked time.Time
	last := ""
	for {
		if time.Since(asked) > 10*time.Second {
			if err := replica.ClusterFailover(ctx).Err(); err != nil {
				return "", fmt.Errorf("cluster failover on %s: %w", replicaAddr, err)
			}
			asked = time.Now()
		}
		last = switched(ctx, rdb, primary, replica, nodes)
		if last == "" {
			return replicaAddr, nil
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return "", fmt.Errorf("replica %s did not take over: %s", replicaAddr, last)
		}
	}
}

// replicaOf returns the address of a connected, healthy replica of primary.
func replicaOf(ctx context.Context, primary *redis.Client) (string, error) {
	addr := primary.Options().Addr
	id, err := primary.ClusterMyID(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("cluster myid on %s: %w", addr, err)
	}
	view, err := primary.ClusterNodes(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("cluster nodes on %s: %w", addr, err)
	}
	for _, n := range parseNodes(view) {
		if n.id == id && !n.primary {
			return "", fmt.Errorf("%s is a replica, not a primary", addr)
		}
		if n.primaryID == id && !n.failing && n.connected {
			return n.addr, nil
		}
	}
	return "", fmt.Errorf("primary %s has no connected replica", addr)
}

// switched says why the failover from primary to replica is not complete,
// or returns "".
func switched(ctx context.Context, rdb *redis.ClusterClient, primary, replica *redis.Client, nodes map[string]*redis.Client) string {
	for _, c := range []struct {
		node *redis.Client
		want string
	}{{replica, "master"}, {primary, "slave"}} {
		role, err := c.node.Do(ctx, "ROLE").Slice()
		if err != nil {
			return fmt.Sprintf("role of %s: %v", c.node.Options().Addr, err)
		}
		if len(role) == 0 || role[0] != c.want {
			return fmt.Sprintf("%s is not a %s yet", c.node.Options().Addr, c.want)
		}
	}
	if why := clusterNotOK(ctx, nodes); why != "" {
		return why
	}
	// ForEachMaster reloads rdb's view of the cluster first.
	var mu sync.Mutex
	masters := map[string]bool{}
	err := rdb.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters[n.Options().Addr] = true
		return nil
	})
	if err != nil {
		return fmt.Sprintf("cluster client: %v", err)
	}
	if !masters[replica.Options().Addr] || masters[primary.Options().Addr] {
		return "the cluster client does not see the new roles yet"
	}
	return ""
}
