package benchmark

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
)

// cpuMeter reads how much CPU one process has used so far.
type cpuMeter struct {
	name string
	read func(context.Context) (time.Duration, error)
}

// ProcCPU is the CPU time one process spent per lookup in a run.
type ProcCPU struct {
	Name  string
	PerOp time.Duration
}

// The processes of a lookup run, in the report's column order.
const (
	cpuServer = "server"
	cpuLoad   = "load generator"
	cpuRedis  = "Redis"
	cpuBroker = "Kafka broker"
	// the aggregator that publishes strict takes' events (its take relay)
	cpuRelay = "aggregator"
)

var cpuColumns = []string{cpuServer, cpuLoad, cpuRedis, cpuBroker, cpuRelay}

// lookupMeters are the processes a lookup run on the single-node stack
// keeps busy: the server under test, the load generator (this process),
// Redis and the Kafka broker (its pid file from scripts/stack; left out if
// it cannot be read). Together they show where a lookup's cost goes and
// how many a second two cores could answer at best.
func (b *bench) lookupMeters(server *childproc.Proc) []cpuMeter {
	ms := []cpuMeter{
		{cpuServer, pidCPU(server.Pid())},
		{cpuLoad, pidCPU(os.Getpid())},
		redisMeter(b.rdb),
	}
	if m, err := b.brokerMeter(); err == nil {
		ms = append(ms, m)
	} else {
		b.log.Warn("bench: no Kafka broker CPU in the lookup figures", "err", err)
	}
	return ms
}

// brokerMeter reads the local stack's Kafka broker's CPU (its pid file from
// scripts/stack).
func (b *bench) brokerMeter() (cpuMeter, error) {
	pid, err := harness.PidFile(filepath.Join(b.cfg.Repo, ".stack", "kafka", "kafka.pid"))
	if err != nil {
		return cpuMeter{}, err
	}
	return cpuMeter{cpuBroker, pidCPU(pid)}, nil
}

// redisMeter reads the CPU time of the Redis rdb talks to (INFO cpu).
func redisMeter(rdb *redis.Client) cpuMeter {
	return cpuMeter{cpuRedis, func(ctx context.Context) (time.Duration, error) {
		info, err := harness.ReadRedisInfo(ctx, rdb)
		return time.Duration(info.CPU * float64(time.Second)), err
	}}
}

// pidCPU reads a process's CPU time.
func pidCPU(pid int) func(context.Context) (time.Duration, error) {
	return func(context.Context) (time.Duration, error) { return harness.ProcCPU(pid) }
}

// readMeters reads every meter.
func readMeters(ctx context.Context, ms []cpuMeter) ([]time.Duration, error) {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		d, err := m.read(ctx)
		if err != nil {
			return nil, fmt.Errorf("cpu of %s: %w", m.name, err)
		}
		out[i] = d
	}
	return out, nil
}

// perOp divides what each meter counted between before and after by ops.
func perOp(ms []cpuMeter, before, after []time.Duration, ops float64) []ProcCPU {
	if ops <= 0 {
		return nil
	}
	out := make([]ProcCPU, len(ms))
	for i, m := range ms {
		out[i] = ProcCPU{Name: m.name, PerOp: time.Duration(float64(after[i]-before[i]) / ops)}
	}
	return out
}
