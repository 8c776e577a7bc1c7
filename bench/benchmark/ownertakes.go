package benchmark

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/bench/rlsload"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/stacktest/promtext"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// ownerTakeRuns measures stage B's strict takes: `floodgate aggregator
// --owner-takes` answers them itself, from its memory, on a topic and key
// prefix of its own (a take there appends its event to the take stream,
// which the same process relays to Kafka and counts). Its CPU is the
// server's: nothing else takes part but Redis and the broker.
//
// envoyproxy/ratelimit, the take goal's reference, runs on the same
// requests just before the owner starts and again just after it stops: a
// figure of this machine drifts by a third over the minutes of the limiter
// step, and the goal is their ratio. The two never run at once.
func (b *bench) ownerTakeRuns(ctx context.Context, t target, rulesPath string) error {
	// Envoy's figures only set the takes' goal: without them the step goes
	// on, and says why they are missing.
	e, err := b.startEnvoyRL(ctx)
	if err == nil {
		var runs []Lookup
		runs, err = e.runs(ctx, b, scEnvoy)
		b.res.Lookups = append(b.res.Lookups, runs...)
	}
	if err != nil {
		b.res.Errors = append(b.res.Errors, fmt.Sprintf("envoyproxy/ratelimit beside the takes: %v", err))
	}
	envoyOK := err == nil
	err = b.ownerTakeOne(ctx, t, rulesPath)
	if e != nil {
		if err == nil && envoyOK {
			runs, rerr := e.runs(ctx, b, scEnvoyAfter)
			b.res.Lookups = append(b.res.Lookups, runs...)
			if rerr != nil {
				b.res.Errors = append(b.res.Errors, fmt.Sprintf("envoyproxy/ratelimit after the takes: %v", rerr))
			}
		}
		err = errors.Join(err, e.stop())
	}
	if err != nil {
		return err
	}
	return b.ownerTakeSplitRuns(ctx, t, rulesPath)
}

// ownerTakeOne runs the single owner's takes.
func (b *bench) ownerTakeOne(ctx context.Context, t target, rulesPath string) error {
	topic, prefix, cleanup, err := b.takeTopic(ctx, "own", "o")
	if err != nil {
		return err
	}
	defer cleanup()
	var addrs [3]string
	for i := range addrs {
		if addrs[i], err = childproc.FreePort(); err != nil {
			return err
		}
	}
	metrics, httpAddr, rls := addrs[0], addrs[1], addrs[2]
	args := append(b.aggregatorArgs(t, topic, "bench-"+b.id+"-own", prefix, rulesPath, metrics),
		"--owner-takes", "--takes-http-addr", httpAddr, "--takes-rls-addr", rls)
	b.res.LookupCmds = append(b.res.LookupCmds, "floodgate "+strings.Join(args, " "))
	p, err := childproc.Start(ctx, childproc.Config{Name: "aggregator-owner-takes", Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
	if err != nil {
		return err
	}
	err = b.ownerTakeLoad(ctx, p, metrics, rls)
	return errors.Join(err, b.stopProc(p, "floodgate aggregator --owner-takes"))
}

func (b *bench) ownerTakeLoad(ctx context.Context, p *childproc.Proc, metrics, rls string) error {
	if err := childproc.WaitHTTP(ctx, "http://"+metrics+"/healthz", time.Minute); err != nil {
		return err
	}
	cl, err := rlsload.Dial(rls, runtime.NumCPU())
	if err != nil {
		return err
	}
	defer cl.Close()
	// ready once every partition is caught up: until then takes are denied
	if err := cl.WaitReady(ctx, shapeStrict, time.Minute); err != nil {
		return fmt.Errorf("owner takes not answering: %w", err)
	}
	// cold: subjects it has never seen, each a load from Redis first
	for i, c := range []int{16, 64} {
		shape := shapeStrictCold
		shape.Base += i * shape.Subjects
		runs, err := b.measure(ctx, p, "http://"+metrics+"/metrics", scOwnerStrictCold, false, cl.Op(shape, rlsload.OK), []int{c}, 0)
		b.res.Lookups = append(b.res.Lookups, runs...)
		if err != nil {
			return err
		}
	}
	// the goal's: every subject asked once first, as Envoy's runs are of
	// a process that has nothing to load
	if err := cl.WaitCode(ctx, shapeStrict, rlsload.OK, 2*time.Minute); err != nil {
		return fmt.Errorf("owner takes: the warm-up: %w", err)
	}
	runs, err := b.measure(ctx, p, "http://"+metrics+"/metrics", scOwnerStrict, false, cl.Op(shapeStrict, rlsload.OK), []int{16, 64}, 0)
	b.res.Lookups = append(b.res.Lookups, runs...)
	return err
}

// takeMember is one `floodgate aggregator --owner-takes` of the split runs.
type takeMember struct {
	p                 *childproc.Proc
	metrics, rls, cmd string
}

// ownerTakeSplitRuns measures strict takes of an IP and an e-mail answered
// by two members with --owner-takes in one group, each owning about half
// the partitions, every take sent to the first. A take whose subjects one
// member owns is answered there (by the first, or forwarded to the second);
// one whose subjects the two own apart is reserved at both and committed
// (takeroute/split.go). The second member's CPU is the report's aggregator
// column; each run says how its takes went.
func (b *bench) ownerTakeSplitRuns(ctx context.Context, t target, rulesPath string) error {
	topic, prefix, cleanup, err := b.takeTopic(ctx, "own2", "p")
	if err != nil {
		return err
	}
	defer cleanup()
	var ms []takeMember
	defer func() {
		for i, m := range ms {
			if err := b.stopProc(m.p, fmt.Sprintf("floodgate aggregator --owner-takes (member %d)", i+1)); err != nil {
				b.log.Warn("bench: stop a take member", "err", err)
			}
		}
	}()
	for i := range 2 {
		m, err := b.startTakeMember(ctx, t, topic, prefix, rulesPath, i)
		if err != nil {
			return err
		}
		ms = append(ms, m)
		b.res.LookupCmds = append(b.res.LookupCmds, m.cmd)
	}
	for _, m := range ms {
		if err := childproc.WaitHTTP(ctx, "http://"+m.metrics+"/healthz", time.Minute); err != nil {
			return err
		}
	}
	if err := b.waitTwoOwners(ctx, prefix); err != nil {
		return err
	}
	cl, err := rlsload.Dial(ms[0].rls, runtime.NumCPU())
	if err != nil {
		return err
	}
	defer cl.Close()
	// every subject's takes answered: both members own partitions, caught
	// up, and each one's owner records are written
	if err := cl.WaitCode(ctx, shapeStrictTwo, rlsload.OK, 2*time.Minute); err != nil {
		return fmt.Errorf("split owner takes not answering: %w", err)
	}
	relay := cpuMeter{cpuRelay, pidCPU(ms[1].p.Pid())}
	for _, c := range []int{16, 64} {
		before, err := promtext.Scrape(ctx, "http://"+ms[0].metrics+"/metrics")
		if err != nil {
			return err
		}
		runs, err := b.measure(ctx, ms[0].p, "http://"+ms[0].metrics+"/metrics", scOwnerStrictTwo, false, cl.Op(shapeStrictTwo, rlsload.OK), []int{c}, 0, relay)
		if err != nil {
			b.res.Lookups = append(b.res.Lookups, runs...)
			return err
		}
		after, err := promtext.Scrape(ctx, "http://"+ms[0].metrics+"/metrics")
		if err != nil {
			return err
		}
		for i := range runs {
			runs[i].Routes = takeRoutes(before, after)
		}
		b.res.Lookups = append(b.res.Lookups, runs...)
	}
	return nil
}

// startTakeMember starts member i of the split runs.
func (b *bench) startTakeMember(ctx context.Context, t target, topic, prefix, rulesPath string, i int) (takeMember, error) {
	var addrs [4]string
	for k := range addrs {
		var err error
		if addrs[k], err = childproc.FreePort(); err != nil {
			return takeMember{}, err
		}
	}
	m := takeMember{metrics: addrs[0], rls: addrs[2]}
	args := append(b.aggregatorArgs(t, topic, "bench-"+b.id+"-own2", prefix, rulesPath, m.metrics),
		"--owner-takes", "--takes-http-addr", addrs[1], "--takes-rls-addr", m.rls, "--takes-peer-addr", addrs[3])
	m.cmd = "floodgate " + strings.Join(args, " ")
	var err error
	m.p, err = childproc.Start(ctx, childproc.Config{Name: fmt.Sprintf("aggregator-owner-takes-%d", i+1), Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
	return m, err
}

// takeRoutes says how a run's takes went at the first member, from its
// floodgate_takeroute_forwarded_total before and after the run (its
// warm-up included); the rest of its takes it answered itself.
func takeRoutes(before, after promtext.Sample) string {
	const name = "floodgate_takeroute_forwarded_total"
	delta := func(results ...string) int64 {
		var n float64
		for _, r := range results {
			label := `result="` + r + `"`
			n += after.Sum(name, label) - before.Sum(name, label)
		}
		return int64(n)
	}
	return fmt.Sprintf("in the run and its warm-up, %d forwarded to the second member, %d split between the two, %d failed",
		delta("forwarded"), delta("split"), delta("failed", "not_owner", "no_owner"))
}

// waitTwoOwners waits until the owner records of the prefix's partitions
// name two members: the group has given each its share.
func (b *bench) waitTwoOwners(ctx context.Context, prefix string) error {
	keys := window.Keys{Prefix: prefix}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		owners := map[string]bool{}
		for p := range b.cfg.PartCount {
			if v, err := b.rdb.Get(ctx, keys.TakesOwner(p)).Result(); err == nil {
				owners[v] = true
			}
		}
		if len(owners) == 2 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("split owner takes: the partitions' owner records name %d members, not 2", len(owners))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// takeTopic creates an events topic of the owner-take runs, with its
// dead-letter and decisions topics, and names their key prefix; cleanup
// deletes the prefix's keys.
func (b *bench) takeTopic(ctx context.Context, name, suffix string) (topic, prefix string, cleanup func(), err error) {
	if topic, err = b.topic(name); err != nil {
		return "", "", nil, err
	}
	if err = b.outputTopics(ctx, topic); err != nil {
		return "", "", nil, err
	}
	prefix = "bench" + b.id + suffix
	return topic, prefix, func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := stacktest.DeletePrefix(cctx, b.rdb, prefix); err != nil {
			b.log.Warn("bench: delete owner take keys", "err", err)
		}
	}, nil
}
