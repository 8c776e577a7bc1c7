package benchmark

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/bench/rlsload"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/stacktest/kafkatopics"
	"github.com/floodgate-dev/floodgate/internal/topics"
)

// ClusterFigures are the cluster step's results.
type ClusterFigures struct {
	// Skipped says why the step did not run ("" when it ran).
	Skipped string
	// Produce is each pre-fill's events/s (floodgate produce, acks=all on a
	// topic with replication factor 3).
	Produce    []float64
	ProduceCmd string
	// One and Two are live events/s per run with one aggregator process and
	// with two in one group.
	One, Two []float64
	LiveCmd  string
}

// clusterRF and clusterMinISR: the replicated topic of the cluster step,
// as the cluster profile's tests create theirs.
const (
	clusterRF     = 3
	clusterMinISR = "2"
)

// cluster: the cluster profile (3 KRaft brokers, Redis Cluster 3+3):
// a replicated topic pre-filled with the benchmark's synthetic events, live
// events/s with one `floodgate aggregator --no-history` process and with
// two in one group, and allowed RLS checks against a limiter on Redis
// Cluster. Skipped, with a note, when the profile is not up.
func (b *bench) cluster(ctx context.Context) error {
	cf := &b.res.Cluster
	t := target{brokers: b.cfg.ClusterBrokers, redis: b.cfg.ClusterRedisAddrs, cluster: true}
	if err := harness.ClusterAnswers(ctx, t.brokers, t.redis); err != nil {
		cf.Skipped = fmt.Sprintf("the cluster profile does not answer (%v); start it with `scripts/stack up --cluster`", err)
		b.log.Warn("bench: cluster step skipped", "why", cf.Skipped)
		return nil
	}
	kc := kafkatopics.New(t.brokers)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: t.redis})
	defer rdb.Close()
	var topicsMade, prefixes []string
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		// Retried: other suites stop cluster nodes on purpose, and the
		// request fails while its broker is down.
		for try := 0; len(topicsMade) > 0; try++ {
			err := kc.DeleteTopics(cctx, topicsMade...)
			if err == nil {
				break
			}
			if try == 4 || cctx.Err() != nil {
				b.log.Warn("bench: delete cluster topics", "topics", topicsMade, "err", err)
				break
			}
			time.Sleep(3 * time.Second)
		}
		for _, p := range prefixes {
			if err := stacktest.DeletePrefix(cctx, rdb, p); err != nil {
				b.log.Warn("bench: delete cluster keys", "prefix", p, "err", err)
			}
		}
	}()
	var topic string
	for i := range b.cfg.Runs {
		topic = fmt.Sprintf("floodgate.bench.%s.cluster%d", b.id, i)
		made, err := b.clusterTopics(ctx, kc, topic)
		topicsMade = append(topicsMade, made...)
		if err != nil {
			return err
		}
		p1, p2 := fmt.Sprintf("bench%sc1r%d", b.id, i), fmt.Sprintf("bench%sc2r%d", b.id, i)
		prefixes = append(prefixes, p1, p2)
		prefill := func(ctx context.Context) error { return b.clusterPrefill(ctx, t, topic, i) }
		two, err := b.clusterLive(ctx, t, topic, p2, 2, i, prefill)
		if err != nil {
			return err
		}
		cf.Two = append(cf.Two, two)
		// The topic is full now: one process, its join left out by starting
		// at its first counted message, as the single-node live step does.
		one, err := b.clusterLive(ctx, t, topic, p1, 1, i, nil)
		if err != nil {
			return err
		}
		cf.One = append(cf.One, one)
	}
	prefix := "bench" + b.id + "cl"
	prefixes = append(prefixes, prefix)
	return b.clusterLookups(ctx, t, topic, prefix)
}

// clusterTopics creates the events topic of a run (replication factor 3,
// min.insync.replicas 2) and the dead-letter and decisions topics the
// aggregator requires, and returns those it created.
func (b *bench) clusterTopics(ctx context.Context, kc *kafkatopics.Client, topic string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var made []string
	for _, s := range []topics.Spec{{Name: topic, Partitions: b.cfg.PartCount}, {Name: topic + ".dlq", Partitions: 1}, {Name: topic + ".decisions", Partitions: 1}} {
		s.ReplicationFactor, s.Configs = clusterRF, map[string]string{"min.insync.replicas": clusterMinISR}
		if err := kc.Create(ctx, s); err != nil {
			return made, err
		}
		made = append(made, s.Name)
	}
	return made, nil
}

// clusterPrefill produces the benchmark's synthetic events into the
// replicated topic, with the producer step's settings.
func (b *bench) clusterPrefill(ctx context.Context, t target, topic string, run int) error {
	args := b.produceArgs(t.brokers, topic, b.cfg.Events, run+1)
	b.res.Cluster.ProduceCmd = "floodgate " + strings.Join(args, " ")
	start := time.Now()
	p, err := childproc.Run(ctx, childproc.Config{Name: "produce-cluster", Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
	wall := time.Since(start)
	b.peak("floodgate produce (cluster)", p)
	if err != nil {
		return err
	}
	b.res.Cluster.Produce = append(b.res.Cluster.Produce, producedRate(p, b.cfg.Events, wall))
	return nil
}

// clusterLive runs procs `floodgate aggregator --no-history` processes in
// one fresh group over the topic and returns their summed events/s, from
// the first sample at which every process had counted a message to the
// last message. With fill, the processes join the group on the empty
// topic and are paused (SIGSTOP) while fill fills it, then continued
// together: no member joins late, no rebalance falls inside the timing,
// and the producer does not set the pace (as the cluster scale-out test
// benchmark in cmd/floodgate does).
func (b *bench) clusterLive(ctx context.Context, t target, topic, prefix string, procs, run int, fill func(context.Context) error) (float64, error) {
	group := fmt.Sprintf("bench-%s-cluster%d-%d", b.id, procs, run)
	var ps []*childproc.Proc
	var urls []string
	stopAll := func() error {
		var errs []error
		for _, p := range ps {
			errs = append(errs, b.stopProc(p, "floodgate aggregator --no-history (cluster)"))
		}
		return errors.Join(errs...)
	}
	for n := range procs {
		addr, err := childproc.FreePort()
		if err != nil {
			return 0, errors.Join(err, stopAll())
		}
		args := b.aggregatorArgs(t, topic, group, prefix, b.rules, addr)
		if fill != nil {
			// Paused members keep their partitions while the topic fills.
			args = append(args, pausedArgs...)
		}
		b.res.Cluster.LiveCmd = "floodgate " + strings.Join(args, " ")
		name := fmt.Sprintf("aggregator-cluster%d-%d-%d", procs, run, n)
		p, err := childproc.Start(ctx, childproc.Config{Name: name, Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
		if err != nil {
			return 0, errors.Join(err, stopAll())
		}
		ps = append(ps, p)
		urls = append(urls, "http://"+addr+"/metrics")
	}
	if fill != nil {
		if err := pausedFill(ctx, ps, urls, fill); err != nil {
			return 0, errors.Join(err, stopAll())
		}
	}
	rate, err := waitCounted(ctx, ps, urls, "floodgate_aggregator_messages_in_total", float64(b.cfg.Events))
	if err != nil {
		err = fmt.Errorf("%d aggregator process(es) on the cluster: %w", procs, err)
	}
	return rate, errors.Join(err, stopAll())
}

// clusterLookups: allowed RLS checks (four limits on two subjects) at c=16
// and c=64 against a limiter on Redis Cluster and the cluster's topic,
// next to the no-op RLS server (measured here when the limiter step did
// not run).
func (b *bench) clusterLookups(ctx context.Context, t target, topic, prefix string) error {
	conc := []int{16, 64}
	if noopRate(b.res.Lookups, 16) == 0 || noopRate(b.res.Lookups, 64) == 0 {
		noop, err := b.noopRuns(ctx, conc, false)
		b.res.Lookups = append(b.res.Lookups, noop...)
		if err != nil {
			return err
		}
	}
	rulesPath, _, err := b.writeLookupRules()
	if err != nil {
		return err
	}
	lim, err := b.startLimiter(ctx, t, "limiter-cluster", topic, prefix, rulesPath, "check")
	if err != nil {
		return err
	}
	b.res.LookupCmds = append(b.res.LookupCmds, lim.cmd)
	runs, err := b.rlsMeasure(ctx, lim.Proc, lim.rls, scAllowedFour, true, shapeFour, rlsload.OK, conc, 0)
	b.res.Lookups = append(b.res.Lookups, runs...)
	return errors.Join(err, b.stopProc(lim.Proc, "floodgate limiter --rls-mode check (cluster)"))
}

// pausedArgs keep a paused member in its group: the session timeout
// outlasts the fill.
var pausedArgs = []string{"--session-timeout", "60s"}

// pausedFill waits until every process joined its group, pauses them all
// (SIGSTOP), runs fill, and continues them (SIGCONT) whatever fill did.
func pausedFill(ctx context.Context, ps []*childproc.Proc, urls []string, fill func(context.Context) error) error {
	if err := waitJoined(ctx, ps, urls); err != nil {
		return err
	}
	signal := func(sig syscall.Signal) error {
		var errs []error
		for _, p := range ps {
			errs = append(errs, p.Signal(sig))
		}
		return errors.Join(errs...)
	}
	err := signal(syscall.SIGSTOP)
	if err == nil {
		err = fill(ctx)
	}
	return errors.Join(err, signal(syscall.SIGCONT))
}

// waitJoined waits until every aggregator process has joined a generation
// of its group (floodgate_aggregator_generations_total): a member joins the
// generation that every member known to the group joins, so they are then
// all in one.
func waitJoined(ctx context.Context, procs []*childproc.Proc, urls []string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		for _, p := range procs {
			if !p.Alive() {
				return fmt.Errorf("%s exited: %s", p.Name(), p.Tail(5))
			}
		}
		if _, all, err := scrapeSum(ctx, urls, "floodgate_aggregator_generations_total"); err == nil && all {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("aggregators did not all join their group: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// producedRate is what `floodgate produce` reports (events acknowledged
// per second), or events over the process's wall time.
func producedRate(p *childproc.Proc, events int, wall time.Duration) float64 {
	if m := reProduced.FindStringSubmatch(childproc.TailFile(p.LogPath, 5)); m != nil {
		if rate, err := strconv.ParseFloat(m[1], 64); err == nil {
			return rate
		}
	}
	return float64(events) / wall.Seconds()
}
