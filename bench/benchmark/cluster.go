package benchmark

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"floodgate/bench/harness"
	"floodgate/bench/rlsload"
	"floodgate/topics"
)

// ClusterFigures are the cluster step's results.
type ClusterFigures struct {
	// Skipped says why the step did not run ("" when it ran).
	Skipped string
	// Produce is the pre-fill's events/s (floodgate produce, acks=all on a
	// topic with replication factor 3).
	Produce    float64
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
	if len(t.brokers) == 0 || len(t.redis) == 0 {
		cf.Skipped = "no cluster addresses (--cluster-brokers, --cluster-redis-addrs; scripts/bench reads them from `scripts/stack env --cluster`)"
		b.log.Warn("bench: cluster step skipped", "why", cf.Skipped)
		return nil
	}
	kc := harness.NewKafka(t.brokers)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: t.redis})
	defer rdb.Close()
	if err := clusterReachable(ctx, kc, rdb); err != nil {
		cf.Skipped = fmt.Sprintf("the cluster profile is not up (%v); start it with `scripts/stack up --cluster`", err)
		b.log.Warn("bench: cluster step skipped", "why", cf.Skipped)
		return nil
	}
	topic := "floodgate.bench." + b.id + ".cluster"
	var prefixes []string
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := kc.DeleteTopics(cctx, topic, topic+".dlq", topic+".decisions"); err != nil {
			b.log.Warn("bench: delete cluster topics", "err", err)
		}
		for _, p := range prefixes {
			if err := harness.DeletePrefix(cctx, rdb, p); err != nil {
				b.log.Warn("bench: delete cluster keys", "prefix", p, "err", err)
			}
		}
	}()
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := kc.Create(tctx, topics.Spec{Name: topic, Partitions: b.cfg.PartCount, ReplicationFactor: clusterRF,
		Configs: map[string]string{"min.insync.replicas": clusterMinISR}})
	cancel()
	if err != nil {
		return err
	}
	if err := b.clusterPrefill(ctx, t, topic); err != nil {
		return err
	}
	for i := range b.cfg.Runs {
		for _, procs := range []int{1, 2} {
			prefix := fmt.Sprintf("bench%sc%dr%d", b.id, procs, i)
			prefixes = append(prefixes, prefix)
			rate, err := b.clusterLive(ctx, t, topic, prefix, procs, i)
			if err != nil {
				return err
			}
			if procs == 1 {
				cf.One = append(cf.One, rate)
			} else {
				cf.Two = append(cf.Two, rate)
			}
		}
	}
	prefix := "bench" + b.id + "cl"
	prefixes = append(prefixes, prefix)
	return b.clusterLookups(ctx, t, topic, prefix)
}

// clusterReachable checks that a broker answers metadata and every Redis
// Cluster node a PING, within a few seconds.
func clusterReachable(ctx context.Context, kc *harness.Kafka, rdb *redis.ClusterClient) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := kc.Reachable(ctx); err != nil {
		return err
	}
	return rdb.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		if err := node.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis %s: %w", node.Options().Addr, err)
		}
		return nil
	})
}

// clusterPrefill produces the benchmark's synthetic events into the
// replicated topic, with the producer step's settings.
func (b *bench) clusterPrefill(ctx context.Context, t target, topic string) error {
	args := b.produceArgs(t.brokers, topic, b.cfg.Events, 1)
	b.res.Cluster.ProduceCmd = "floodgate " + strings.Join(args, " ")
	start := time.Now()
	p, err := harness.Run(ctx, harness.ProcConfig{Name: "produce-cluster", Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
	wall := time.Since(start)
	b.peak("floodgate produce (cluster)", p)
	if err != nil {
		return err
	}
	b.res.Cluster.Produce = producedRate(p, b.cfg.Events, wall)
	return nil
}

// clusterLive runs procs `floodgate aggregator --no-history` processes in
// one fresh group over the pre-filled topic and returns their summed
// events/s, from the first sample at which every process had counted a
// message to the last message.
func (b *bench) clusterLive(ctx context.Context, t target, topic, prefix string, procs, run int) (float64, error) {
	group := fmt.Sprintf("bench-%s-cluster%d-%d", b.id, procs, run)
	var ps []*harness.Proc
	var urls []string
	stopAll := func() error {
		var errs []error
		for _, p := range ps {
			errs = append(errs, b.stopProc(p, "floodgate aggregator --no-history (cluster)"))
		}
		return errors.Join(errs...)
	}
	for n := range procs {
		addr, err := harness.FreePort()
		if err != nil {
			return 0, errors.Join(err, stopAll())
		}
		args := b.aggregatorArgs(t, topic, group, prefix, addr)
		b.res.Cluster.LiveCmd = "floodgate " + strings.Join(args, " ")
		name := fmt.Sprintf("aggregator-cluster%d-%d-%d", procs, run, n)
		p, err := harness.Start(ctx, harness.ProcConfig{Name: name, Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
		if err != nil {
			return 0, errors.Join(err, stopAll())
		}
		ps = append(ps, p)
		urls = append(urls, "http://"+addr+"/metrics")
	}
	rate, err := waitCounted(ctx, ps, urls, "floodgate_aggregator_messages_in_total", float64(b.cfg.Events))
	if err != nil {
		err = fmt.Errorf("%d aggregator process(es) on the cluster: %w", procs, err)
	}
	return rate, errors.Join(err, stopAll())
}

// clusterLookups: allowed RLS checks (four limits on two subjects) at c=16
// and c=64 against a limiter on Redis Cluster and the cluster's topic.
func (b *bench) clusterLookups(ctx context.Context, t target, topic, prefix string) error {
	rulesPath, _, err := b.lookupRules()
	if err != nil {
		return err
	}
	lim, err := b.startLimiter(ctx, t, "limiter-cluster", topic, prefix, rulesPath, "check")
	if err != nil {
		return err
	}
	b.res.LookupCmds = append(b.res.LookupCmds, lim.cmd)
	runs, err := b.rlsMeasure(ctx, lim.rls, scAllowedFour, true, shapeFour, rlsload.OK, []int{16, 64}, 0)
	b.res.Lookups = append(b.res.Lookups, runs...)
	return errors.Join(err, b.stopProc(lim.Proc, "floodgate limiter --rls-mode check (cluster)"))
}

// producedRate is what `floodgate produce` reports (events acknowledged
// per second), or events over the process's wall time.
func producedRate(p *harness.Proc, events int, wall time.Duration) float64 {
	if m := reProduced.FindStringSubmatch(harness.TailFile(p.LogPath, 5)); m != nil {
		if rate, err := strconv.ParseFloat(m[1], 64); err == nil {
			return rate
		}
	}
	return float64(events) / wall.Seconds()
}
