package benchmark

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/stacktest/kafkatopics"
	"github.com/floodgate-dev/floodgate/internal/topics"
)

// ScaleFigures are the scale-out step's results: live events/s and CPU per
// event with N capped aggregator processes on capped Redis primaries.
type ScaleFigures struct {
	Skipped string // why the step did not run ("" when it ran)
	// Cap and RedisCap are the CPU each aggregator process and each Redis
	// primary may use, in cores.
	Cap, RedisCap float64
	Partitions    int
	Events        int
	// Busiest is the share of the events in the busiest partition.
	Busiest float64
	Rows    []ScaleRow
	Cmd     string
}

// ScaleRow is one member count's runs.
type ScaleRow struct {
	Members int
	Rate    []float64 // events/s over the steady window, per run
	AggCPU  []float64 // aggregator CPU per event, all members, µs
	Redis   []float64 // Redis primaries' CPU per event, µs
}

// scaleSubjects and scaleRuns: a uniform mix over many subjects keeps the
// busiest of 24 partitions near 1/24 of the events (the Zipf mix of the
// other steps puts a fifth in one), so N members can each get a fair share.
const (
	scaleSubjects   = 50_000
	scalePartitions = 24
)

// scaleOut: N = 1, 2, 4 `floodgate aggregator --no-history` processes in one
// group over a 24-partition replicated topic of the cluster profile, each
// process and each Redis primary held to a CPU cap by a cgroup, so that N
// members never need more than the machine and the ratio to N = 1 says how
// the work divides, not how the machine's cores are shared. Skipped, with
// the reason, without the cluster profile or a writable cgroup CPU
// controller.
func (b *bench) scaleOut(ctx context.Context) error {
	sf := &b.res.Scale
	sf.Cap, sf.RedisCap, sf.Partitions, sf.Events = b.cfg.ScaleCPU, b.cfg.ScaleRedisCPU, scalePartitions, b.cfg.ScaleEvents
	t := target{brokers: b.cfg.ClusterBrokers, redis: b.cfg.ClusterRedisAddrs, cluster: true}
	if err := harness.ClusterAnswers(ctx, t.brokers, t.redis); err != nil {
		sf.Skipped = fmt.Sprintf("the cluster profile does not answer (%v); start it with `scripts/stack up --cluster`", err)
		return nil
	}
	cg, err := newCPUCgroups("floodgate-bench-" + b.id)
	if err != nil {
		sf.Skipped = fmt.Sprintf("no cgroup CPU controller to cap processes with (%v)", err)
		b.log.Warn("bench: scale-out step skipped", "why", sf.Skipped)
		return nil
	}
	defer cg.release(b.log)
	primaries, err := redisPrimaries(ctx, t.redis)
	if err != nil {
		return err
	}
	defer closeAll(primaries)
	for _, p := range primaries {
		if err := cg.limit(fmt.Sprintf("redis-%d", p.pid), p.pid, sf.RedisCap); err != nil {
			return err
		}
	}
	kc := kafkatopics.New(t.brokers)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: t.redis})
	defer rdb.Close()
	for _, n := range []int{1, 2, 4} {
		row := ScaleRow{Members: n}
		for run := range max(b.cfg.Runs, 1) {
			rate, agg, red, err := b.scaleRun(ctx, kc, rdb, t, cg, primaries, n, run)
			if err != nil {
				return err
			}
			row.Rate, row.AggCPU, row.Redis = append(row.Rate, rate), append(row.AggCPU, agg), append(row.Redis, red)
		}
		sf.Rows = append(sf.Rows, row)
	}
	return nil
}

// scaleRun runs n capped members in a fresh group over a fresh topic and
// returns events/s, aggregator CPU per event (µs, all members) and Redis
// primaries' CPU per event (µs), over the steady window. The members join
// on the empty topic and are paused while it fills (as the cluster step
// does): none joins late, and no rebalance falls inside the timing.
func (b *bench) scaleRun(ctx context.Context, kc *kafkatopics.Client, rdb *redis.ClusterClient, t target, cg *cpuCgroups, primaries []redisNode, n, run int) (rate, agg, red float64, err error) {
	topic := fmt.Sprintf("floodgate.bench.%s.scale%d-%d", b.id, n, run)
	prefix := fmt.Sprintf("bench%ssc%dr%d", b.id, n, run)
	made, err := b.scaleTopic(ctx, kc, topic)
	defer func() {
		cctx := context.WithoutCancel(ctx)
		if len(made) > 0 {
			err = errors.Join(err, kc.DeleteTopics(cctx, made...))
		}
		err = errors.Join(err, stacktest.DeletePrefix(cctx, rdb, prefix))
	}()
	if err != nil {
		return 0, 0, 0, err
	}
	fill := func(ctx context.Context) error {
		args := b.produceArgs(t.brokers, topic, b.res.Scale.Events, 7+run)
		args = append(args, "--uniform")
		args[slicesIndex(args, "--subjects")+1] = strconv.Itoa(scaleSubjects)
		if _, err := childproc.Run(ctx, childproc.Config{Name: "produce-scale", Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir}); err != nil {
			return err
		}
		share, err := busiestShare(ctx, kc, topic)
		b.res.Scale.Busiest = max(b.res.Scale.Busiest, share)
		return err
	}
	group := fmt.Sprintf("bench-%s-scale%d-%d", b.id, n, run)
	var ps []*childproc.Proc
	var urls []string
	defer func() {
		for _, p := range ps {
			// Measured: the cap goes before the stop, and the stop waits
			// longer than other steps' for the graceful shutdown's last
			// checkpoint, written to Redis primaries still capped.
			err = errors.Join(err, cg.free(p.Pid()), p.Stop(2*time.Minute))
			b.peak("floodgate aggregator --no-history (scale-out)", p)
		}
	}()
	for i := range n {
		addr, err := childproc.FreePort()
		if err != nil {
			return 0, 0, 0, err
		}
		args := append(b.aggregatorArgs(t, topic, group, prefix, b.rules, addr), pausedArgs...)
		b.res.Scale.Cmd = "floodgate " + strings.Join(args, " ")
		p, err := childproc.Start(ctx, childproc.Config{Name: fmt.Sprintf("aggregator-scale%d-%d-%d", n, run, i), Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
		if err != nil {
			return 0, 0, 0, err
		}
		ps = append(ps, p)
		urls = append(urls, "http://"+addr+"/metrics")
	}
	// The caps go on while the members are paused, after they joined: a
	// join at a fifth of a core is slow enough to rebalance the group again
	// inside the timing.
	capFill := func(ctx context.Context) error {
		for _, p := range ps {
			if err := cg.limit(fmt.Sprintf("agg-%d", p.Pid()), p.Pid(), b.res.Scale.Cap); err != nil {
				return err
			}
		}
		return fill(ctx)
	}
	if err := pausedFill(ctx, ps, urls, capFill); err != nil {
		return 0, 0, 0, err
	}
	var agg0, red0 float64
	var merr error
	win, err := waitWindow(ctx, ps, urls, "floodgate_aggregator_messages_in_total", float64(b.res.Scale.Events), steadyFrom, func() {
		agg0, red0, merr = scaleCPU(ctx, ps, primaries)
	})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%d capped aggregator process(es): %w", n, err)
	}
	agg1, red1, err := scaleCPU(ctx, ps, primaries)
	if err = errors.Join(merr, err); err != nil {
		return 0, 0, 0, err
	}
	ev := win.events()
	return win.rate(), (agg1 - agg0) * 1e6 / ev, (red1 - red0) * 1e6 / ev, nil
}

// scaleTopic creates the step's replicated topic and the two the
// aggregator requires.
func (b *bench) scaleTopic(ctx context.Context, kc *kafkatopics.Client, topic string) ([]string, error) {
	var made []string
	for _, s := range []topics.Spec{{Name: topic, Partitions: scalePartitions}, {Name: topic + ".dlq", Partitions: 1}, {Name: topic + ".decisions", Partitions: 1}} {
		s.ReplicationFactor, s.Configs = clusterRF, map[string]string{"min.insync.replicas": clusterMinISR}
		if err := kc.Create(ctx, s); err != nil {
			return made, err
		}
		made = append(made, s.Name)
	}
	return made, nil
}

// scaleCPU is the CPU seconds the members and the Redis primaries used so
// far.
func scaleCPU(ctx context.Context, ps []*childproc.Proc, primaries []redisNode) (agg, red float64, err error) {
	for _, p := range ps {
		d, perr := harness.ProcCPU(p.Pid())
		err = errors.Join(err, perr)
		agg += d.Seconds()
	}
	for _, n := range primaries {
		info, ierr := harness.ReadRedisInfo(ctx, n.rdb)
		err = errors.Join(err, ierr)
		red += info.CPU
	}
	return agg, red, err
}

// busiestShare is the share of a topic's records in its fullest partition.
func busiestShare(ctx context.Context, kc *kafkatopics.Client, topic string) (float64, error) {
	ends, err := kc.EndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	var sum, top int64
	for _, e := range ends {
		sum += e
		top = max(top, e)
	}
	if sum == 0 {
		return 0, errors.New("scale-out topic is empty")
	}
	return float64(top) / float64(sum), nil
}

// redisNode is a Redis primary of the cluster profile: its client and pid.
type redisNode struct {
	rdb *redis.Client
	pid int
}

// redisPrimaries finds the cluster's primaries and their process ids (the
// stack runs them on this machine).
func redisPrimaries(ctx context.Context, addrs []string) ([]redisNode, error) {
	var out []redisNode
	for _, a := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		role, err := rdb.Do(ctx, "ROLE").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			rdb.Close()
			if err != nil {
				closeAll(out)
				return nil, fmt.Errorf("redis %s ROLE: %w", a, err)
			}
			continue
		}
		info, err := rdb.Info(ctx, "server").Result()
		pid := infoInt(info, "process_id")
		if err != nil || pid <= 0 {
			rdb.Close()
			closeAll(out)
			return nil, fmt.Errorf("redis %s: no process_id in INFO server (%v)", a, err)
		}
		out = append(out, redisNode{rdb: rdb, pid: pid})
	}
	if len(out) == 0 {
		return nil, errors.New("no Redis primary among the cluster addresses")
	}
	return out, nil
}

func infoInt(info, field string) int {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

func closeAll(ns []redisNode) {
	for _, n := range ns {
		_ = n.rdb.Close()
	}
}

func slicesIndex(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

// cpuCgroups caps processes' CPU with cgroups under one parent: cgroup v2's
// cpu.max where the unified hierarchy has the cpu controller, else v1's
// cfs quota. Processes moved in are moved back to the root when released:
// the Redis primaries are the stack's, and outlive the step.
type cpuCgroups struct {
	root   string // the hierarchy's root: cgroup.procs there takes processes back
	parent string
	v2     bool
	moved  []int
	groups []string
}

func newCPUCgroups(name string) (*cpuCgroups, error) {
	for _, c := range []struct {
		root string
		v2   bool
	}{{"/sys/fs/cgroup", true}, {"/sys/fs/cgroup/unified", true}, {"/sys/fs/cgroup/cpu", false}} {
		if c.v2 {
			ctl, err := os.ReadFile(filepath.Join(c.root, "cgroup.subtree_control"))
			if err != nil || !strings.Contains(string(ctl), "cpu") {
				continue
			}
		} else if _, err := os.Stat(filepath.Join(c.root, "cpu.cfs_quota_us")); err != nil {
			continue
		}
		parent := filepath.Join(c.root, name)
		if err := os.Mkdir(parent, 0o755); err != nil {
			return nil, err
		}
		if c.v2 {
			if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+cpu"), 0o644); err != nil {
				_ = os.Remove(parent)
				return nil, err
			}
		}
		return &cpuCgroups{root: c.root, parent: parent, v2: c.v2}, nil
	}
	return nil, errors.New("neither cgroup v2 with the cpu controller nor v1's cpu hierarchy is mounted writable")
}

// limit moves pid into a cgroup of its own capped at cores.
func (c *cpuCgroups) limit(name string, pid int, cores float64) error {
	dir := filepath.Join(c.parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	c.groups = append(c.groups, dir)
	const period = 100_000
	quota := strconv.Itoa(int(cores * period))
	var err error
	if c.v2 {
		err = os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(quota+" "+strconv.Itoa(period)), 0o644)
	} else {
		err = errors.Join(os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(period)), 0o644),
			os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(quota), 0o644))
	}
	if err != nil {
		return fmt.Errorf("cap %s at %.2f cores: %w", name, cores, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("move pid %d into %s: %w", pid, dir, err)
	}
	c.moved = append(c.moved, pid)
	return nil
}

// free moves pid back to the root: uncapped.
func (c *cpuCgroups) free(pid int) error {
	if err := os.WriteFile(filepath.Join(c.root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("uncap pid %d: %w", pid, err)
	}
	return nil
}

// release moves every process still alive back to the root and removes
// the groups.
func (c *cpuCgroups) release(log interface{ Warn(string, ...any) }) {
	for _, pid := range c.moved {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
			continue
		}
		if err := c.free(pid); err != nil {
			log.Warn("bench: could not move a process out of its CPU cap: it stays capped", "pid", pid, "err", err)
		}
	}
	for i := len(c.groups) - 1; i >= 0; i-- {
		_ = os.Remove(c.groups[i])
	}
	_ = os.Remove(c.parent)
}

// renderScale is the scale-out table: a row per member count.
func renderScale(w func(string, ...any), r *Results) {
	s := r.Scale
	switch {
	case s.Skipped != "":
		w("\nScale-out: not measured (%s).\n", s.Skipped)
		return
	case len(s.Rows) == 0:
		return
	}
	w("\nScale-out on the cluster profile: each aggregator process capped at %.2f core and each Redis primary at %.2f (cgroup CPU quota), %d partitions, %s events of a uniform mix over %d subjects (busiest partition %.1f%% of the events), rates and CPU over the steady window (a quarter of the events counted to the last), min–median–max of the runs:\n\n",
		s.Cap, s.RedisCap, s.Partitions, harness.Human(float64(s.Events)), scaleSubjects, 100*s.Busiest)
	w("| members | events/s | ÷ N × one member | aggregator CPU µs/event | per member vs N = 1 | Redis primaries µs/event |\n|--:|--:|--:|--:|--:|--:|\n")
	one, oneCPU := harness.Median(s.Rows[0].Rate), harness.Median(s.Rows[0].AggCPU)
	for _, row := range s.Rows {
		rate, cpu := harness.Median(row.Rate), harness.Median(row.AggCPU)
		w("| %d | %s | %.2f | %.2f | %+.0f%% | %.2f |\n", row.Members, spread(row.Rate, harness.Human), rate/(float64(row.Members)*one),
			cpu, 100*(cpu/oneCPU-1), harness.Median(row.Redis))
	}
	w("\nCommand of a member: `%s`.\n", s.Cmd)
}

// spread is "min–median–max" of vs through f.
func spread(vs []float64, f func(float64) string) string {
	if len(vs) == 0 {
		return "—"
	}
	lo, hi := vs[0], vs[0]
	for _, v := range vs {
		lo, hi = min(lo, v), max(hi, v)
	}
	return f(lo) + "–" + f(harness.Median(vs)) + "–" + f(hi)
}
