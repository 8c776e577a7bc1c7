package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// TestAggregatorRecountsWhatRedisLost: Redis loses every key of the live
// path under load, as a restart without persistence does, while the
// aggregator runs (it is paused meanwhile, so the loss is whole, as a
// restart's is). Each partition's next batch or checkpoint finds its slot
// gone, and the aggregator counts the partition again from the log, the
// longest window back, with no rebuild: the counts end exact against the
// topic.
func TestAggregatorRecountsWhatRedisLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{partitions: 4, rules: clusterRules})
	a := e.start("a")
	load := e.startLoad(t, 400, 200)
	e.waitOwns("a")
	e.waitFresh(time.Minute)

	paused(t, a, func() error { return stacktest.DeletePrefix(context.Background(), e.rdb, e.prefix) })
	t.Log("every key of the live path deleted")
	stacktest.WaitFor(t, "a recount of every partition", time.Minute, func() bool {
		body, err := httpGet(metricsAddr(t, e, "a"))
		return err == nil && metricValue(body, "floodgate_aggregator_recounts_total", `group="`+e.group+`"`) == float64(e.partitions)
	})
	e.waitFresh(2 * time.Minute)
	if !e.logsContain("recount done") {
		t.Error("no partition logged the end of its recount")
	}
	tally := load.finish(t)
	e.checkExact(tally, 2*time.Minute)
}

// TestOwnerTakesExactWhenRedisLosesEverything: ownerTakesExact's takes
// while Redis loses every key of the live path at once (the owner paused
// meanwhile, as a restart without persistence looks to it): the take
// streams, their relay cursors and every slot. The owner appends again the
// takes Redis had acknowledged and lost, its partitions are counted again
// from the log, and their takes reopen only then: no subject is admitted
// past its limit, and each is counted exactly its limit in Redis and in
// the events topic.
func TestOwnerTakesExactWhenRedisLosesEverything(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{partitions: 4, rules: ownerTakeRules})
	ownerTakesExact(t, e, 40, func(run *ownerTakesRun) {
		run.failedMayCount = true
		stacktest.WaitFor(t, "takes admitted", 90*time.Second, func() bool { return run.total() >= 300 })
		// every partition applied: a slot never written is no loss
		e.waitPast(time.Minute)
		paused(t, run.p, func() error { return stacktest.DeletePrefix(context.Background(), e.rdb, e.prefix) })
		stacktest.WaitFor(t, "a recount of every partition", time.Minute, func() bool {
			body, err := httpGet(metricsAddr(t, e, run.p.name))
			return err == nil && metricValue(body, "floodgate_aggregator_recounts_total", `group="`+e.group+`"`) == float64(e.partitions)
		})
	})
}

// paused runs fault with p stopped (SIGSTOP), so that what fault changes
// happens at once as p sees it, as a restart's loss does.
func paused(t *testing.T, p *proc, fault func() error) {
	t.Helper()
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	err := fault()
	if cerr := syscall.Kill(pid, syscall.SIGCONT); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
}
