package benchmark

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"floodgate/bench/rlsload"
	"floodgate/stacktest"
	"floodgate/stacktest/childproc"
)

// ownerTakeRuns measures stage B's strict takes: `floodgate aggregator
// --owner-takes` answers them itself, from its memory, on a topic and key
// prefix of its own (a take there appends its event to the take stream,
// which the same process relays to Kafka and counts). Its CPU is the
// server's: nothing else takes part but Redis and the broker.
func (b *bench) ownerTakeRuns(ctx context.Context, t target, rulesPath string) error {
	topic, err := b.topic("own")
	if err != nil {
		return err
	}
	if err := b.outputTopics(ctx, topic); err != nil {
		return err
	}
	prefix := "bench" + b.id + "o"
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := stacktest.DeletePrefix(cctx, b.rdb, prefix); err != nil {
			b.log.Warn("bench: delete owner take keys", "err", err)
		}
	}()
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
	runs, err := b.measure(ctx, p, "http://"+metrics+"/metrics", scOwnerStrict, false, cl.Op(shapeStrict, rlsload.OK), []int{16, 64}, 0)
	b.res.Lookups = append(b.res.Lookups, runs...)
	return err
}
