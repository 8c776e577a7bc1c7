// Command floodbench runs floodgate's benchmark (make bench) and fault suite
// (make chaos) against the local stack. It wires flags to the benchmark and
// faults packages and holds no logic of its own.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/floodgate-dev/floodgate/bench/attack"
	"github.com/floodgate-dev/floodgate/bench/benchmark"
	"github.com/floodgate-dev/floodgate/bench/faults"
	"github.com/floodgate-dev/floodgate/bench/rlsload"
)

// Stack locates the local stack (see `scripts/stack env`).
type Stack struct {
	Brokers     []string `name:"brokers" env:"FLOODGATE_BROKERS" default:"127.0.0.1:19092" sep:","`
	RedisAddr   string   `name:"redis-addr" env:"FLOODGATE_REDIS_ADDR" default:"127.0.0.1:16379"`
	PostgresURL string   `name:"postgres-url" env:"FLOODGATE_POSTGRES_URL" default:"postgres://floodgate@127.0.0.1:15432/floodgate?sslmode=disable"`
	Bin         string   `name:"bin" required:"" help:"floodgate binary under test."`
	Repo        string   `name:"repo" default:"." help:"Repository root."`
	WorkDir     string   `name:"workdir" help:"Logs and generated files (default: a temp dir)."`
}

// ClusterStack locates the stack's --cluster profile (see `scripts/stack
// env --cluster`).
type ClusterStack struct {
	ClusterBrokers    []string `name:"cluster-brokers" env:"FLOODGATE_CLUSTER_BROKERS" default:"127.0.0.1:29092,127.0.0.1:29192,127.0.0.1:29292" sep:"," help:"Brokers of the --cluster profile."`
	ClusterRedisAddrs []string `name:"cluster-redis-addrs" env:"FLOODGATE_CLUSTER_REDIS_ADDRS" default:"127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005,127.0.0.1:17006" sep:"," help:"Redis Cluster seeds of the --cluster profile."`
}

// SecureStack locates the stack's --secure profile (see `scripts/stack env
// --secure`).
type SecureStack struct {
	SecureDir       string `name:"secure-dir" env:"FLOODGATE_SECURE_DIR" help:"Directory of the --secure profile (CA, secret files); empty: the secure step is skipped with a note."`
	SecureBrokers   string `name:"secure-brokers" env:"FLOODGATE_SECURE_BROKERS" default:"127.0.0.1:19094" help:"SASL_SSL broker of the --secure profile."`
	SecureRedisAddr string `name:"secure-redis-addr" env:"FLOODGATE_SECURE_REDIS_ADDR" default:"127.0.0.1:16380" help:"TLS Redis of the --secure profile."`
}

// ChaosCmd runs the fault suite.
type ChaosCmd struct {
	Stack
	ClusterStack
	Rate     float64  `name:"rate" default:"2000" help:"Background load, events/s."`
	Subjects int      `name:"subjects" default:"300" help:"Subjects per scenario."`
	Kills    int      `name:"kills" default:"3" help:"SIGKILLs of an aggregator."`
	Only     []string `name:"only" sep:"," help:"Run only scenarios whose names contain these (baseline,sigkill,malformed,bad-rules,postgres,kafka,apply-error,crash-publish,rebuild-beside,retention-gap,topic-recreated,redis; cluster-baseline,cluster-sigkill,cluster-redis-failover,cluster-redis-kill,cluster-redis-kill-behind,cluster-kafka-kill, or cluster for them all). Default: all, the cluster ones when the cluster profile answers."`
	Out      string   `name:"out" default:"docs/faults.md" help:"Markdown file to write (empty: none)."`
}

// Run runs the suite; it fails when a scenario failed.
func (c *ChaosCmd) Run(ctx context.Context, log *slog.Logger) error {
	rows, err := faults.Run(ctx, faults.Config{
		Bin: c.Bin, Repo: c.Repo, Brokers: c.Brokers, RedisAddr: c.RedisAddr, PostgresURL: c.PostgresURL,
		ClusterBrokers: c.ClusterBrokers, ClusterRedisAddrs: c.ClusterRedisAddrs,
		WorkDir: c.WorkDir, Rate: c.Rate, Subjects: c.Subjects, Kills: c.Kills, Only: c.Only, Out: c.Out, Logger: log,
	})
	if err != nil {
		return err
	}
	return failures("fault", rows, func(r faults.Row) bool { return r.Pass })
}

// AttackCmd runs the hostile-client suite.
type AttackCmd struct {
	Stack
	Subjects int      `name:"subjects" default:"1000000" help:"Invented subjects of the memory scenario."`
	Bound    int64    `name:"limiter-rss-bound" default:"536870912" help:"The limiter's documented peak RSS bound under the memory scenario, bytes."`
	Only     []string `name:"only" sep:"," help:"Run only scenarios whose names contain these (invalid-subject, degraded-redis, compressed-record, million-subjects, peer-forgery, email-case, rls-descriptors, http-subjects, rls-empty-value, fetch-of-bombs). Default: all."`
	Out      string   `name:"out" default:"docs/faults.md" help:"Markdown file whose attack block is rewritten (empty: none)."`
}

// Run runs the suite; it fails when a scenario failed.
func (c *AttackCmd) Run(ctx context.Context, log *slog.Logger) error {
	rows, err := attack.Run(ctx, attack.Config{
		Bin: c.Bin, Brokers: c.Brokers, RedisAddr: c.RedisAddr, PostgresURL: c.PostgresURL, WorkDir: c.WorkDir,
		Subjects: c.Subjects, LimiterRSSBound: c.Bound, Only: c.Only, Out: c.Out, Logger: log,
	})
	for _, r := range rows {
		fmt.Println(attack.FormatRow(r))
	}
	if err != nil {
		return err
	}
	return failures("attack", rows, func(r attack.Row) bool { return r.Pass })
}

// failures is the error of a suite whose rows did not all pass.
func failures[R any](suite string, rows []R, pass func(R) bool) error {
	failed := 0
	for _, r := range rows {
		if !pass(r) {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d %s scenarios failed", failed, len(rows), suite)
	}
	return nil
}

// BenchCmd runs the benchmark.
type BenchCmd struct {
	Stack
	benchmark.Options
	ClusterStack
	SecureStack
	Out string `name:"out" default:"docs/benchmarks.md" help:"Markdown file whose summary block is rewritten (empty: none)."`
}

// Run runs the benchmark and writes the summary.
func (c *BenchCmd) Run(ctx context.Context, log *slog.Logger) error {
	return benchmark.Run(ctx, benchmark.Config{
		Bin: c.Bin, Repo: c.Repo, Brokers: c.Brokers, RedisAddr: c.RedisAddr, PostgresURL: c.PostgresURL,
		ClusterBrokers: c.ClusterBrokers, ClusterRedisAddrs: c.ClusterRedisAddrs,
		SecureDir: c.SecureDir, SecureBrokers: c.SecureBrokers, SecureRedisAddr: c.SecureRedisAddr,
		WorkDir: c.WorkDir, Options: c.Options, Out: c.Out, Logger: log,
	})
}

// RLSNoopCmd serves the no-op RLS server: the ceiling the limiter's RLS
// lookups are measured against (the benchmark's limiter step runs it as a
// process of its own).
type RLSNoopCmd struct {
	Addr string `name:"addr" default:"127.0.0.1:8091" help:"Address to serve envoy.service.ratelimit.v3.RateLimitService on (port 0 picks one)."`
}

// Run serves until SIGINT or SIGTERM.
func (c *RLSNoopCmd) Run(ctx context.Context, log *slog.Logger) error {
	return rlsload.ServeNoop(ctx, c.Addr, log)
}

// RLSLoadCmd sends RLS load to any RateLimitService (a floodgate limiter's
// --rls-addr, the no-op server) and prints lookups/s and latencies.
type RLSLoadCmd struct {
	Addr        string        `name:"addr" default:"127.0.0.1:8081" help:"RLS server address."`
	Domain      string        `name:"domain" default:"login_failed" help:"Domain of the requests (floodgate: the action)."`
	Kinds       []string      `name:"kinds" default:"ip,email" sep:"," help:"One descriptor per kind, one entry each."`
	Subjects    int           `name:"subjects" default:"10000" help:"Distinct subjects per kind (uniform)."`
	Base        int           `name:"base" default:"0" help:"Index of the first subject (rlsload.Subject names them)."`
	HitsAddend  uint32        `name:"hits-addend" default:"0" help:"hits_addend of each request (0: one)."`
	Expect      string        `name:"expect" default:"ok" enum:"ok,over_limit" help:"Overall code each answer should have; others are counted as unexpected."`
	Concurrency []int         `name:"concurrency" default:"1,16,64" sep:"," help:"Closed-loop runs: concurrent callers of each."`
	Rate        float64       `name:"rate" help:"Also a paced run at this many lookups/s (latency from the scheduled time)."`
	Duration    time.Duration `name:"duration" default:"3s" help:"Measured length of each run (after a warm-up of a fifth of it, at most 1s)."`
	Conns       int           `name:"conns" default:"${cpus}" help:"HTTP/2 connections (Envoy: one per worker thread)."`
}

// Run measures each load in turn and prints a line per run.
func (c *RLSLoadCmd) Run(ctx context.Context) error {
	want, err := rlsload.ParseCode(c.Expect)
	if err != nil {
		return err
	}
	cl, err := rlsload.Dial(c.Addr, c.Conns)
	if err != nil {
		return err
	}
	defer cl.Close()
	shape := rlsload.Shape{Domain: c.Domain, Kinds: c.Kinds, Subjects: c.Subjects, Base: c.Base, HitsAddend: c.HitsAddend}
	if err := cl.WaitReady(ctx, shape, 10*time.Second); err != nil {
		return err
	}
	cfgs := make([]rlsload.Config, 0, len(c.Concurrency)+1)
	for _, n := range c.Concurrency {
		cfgs = append(cfgs, rlsload.Config{Op: cl.Op(shape, want), Concurrency: n, Duration: c.Duration})
	}
	if c.Rate > 0 {
		cfgs = append(cfgs, rlsload.Config{Op: cl.Op(shape, want), Rate: c.Rate, Duration: c.Duration})
	}
	var rs []rlsload.Result
	for _, cfg := range cfgs {
		r, err := rlsload.Run(ctx, cfg)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	rlsload.WriteText(os.Stdout, rs)
	return nil
}

// OwnerMemoryCmd measures a write-back owner's memory of one partition in
// this process (the benchmark's owner-memory step runs it as a process of
// its own, so that RSS is the measurement's alone).
type OwnerMemoryCmd struct {
	RedisAddr   string `name:"redis-addr" env:"FLOODGATE_REDIS_ADDR" default:"127.0.0.1:16379" help:"Redis (keys under a prefix of their own, deleted at the end)."`
	Subjects    int    `name:"subjects" default:"1000000" help:"Distinct subjects, one event each."`
	Batch       int    `name:"batch" default:"1000" help:"Events per batch."`
	Every       int    `name:"every" default:"50" help:"Batches between checkpoints, or fewer: a partition also checkpoints once --max-pending fields wait."`
	MaxPending  int    `name:"max-pending" default:"50000" help:"Bucket fields pending before a checkpoint (the live sink's default)."`
	MaxHeadroom int    `name:"max-headroom" default:"200000" help:"Headroom bound (the live sink's default)."`
}

// Run measures and prints the figures.
func (c *OwnerMemoryCmd) Run(ctx context.Context) error {
	return benchmark.MeasureOwnerMemory(ctx, os.Stdout, benchmark.OwnerMemoryConfig{
		RedisAddr: c.RedisAddr, N: c.Subjects, Batch: c.Batch, Every: c.Every, MaxPending: c.MaxPending, MaxHeadroom: c.MaxHeadroom,
	})
}

type cli struct {
	Chaos   ChaosCmd       `cmd:"" help:"Fault suite → docs/faults.md."`
	Attack  AttackCmd      `cmd:"" help:"Hostile-client suite → docs/faults.md (Attacks)."`
	Bench   BenchCmd       `cmd:"" help:"Benchmarks against Kafka's own tools → docs/benchmarks.md."`
	RLSNoop RLSNoopCmd     `cmd:"" name:"rls-noop" help:"Serve the no-op Envoy RLS server (the ceiling of the limiter step)."`
	RLSLoad RLSLoadCmd     `cmd:"" name:"rls-load" help:"Envoy RLS load against any RateLimitService: lookups/s and p50/p99/p99.9."`
	Owner   OwnerMemoryCmd `cmd:"" name:"owner-memory" help:"A write-back owner's memory per resident subject (the benchmark's owner-memory step)."`
}

func main() {
	var c cli
	kctx := kong.Parse(&c, kong.Name("floodbench"), kong.UsageOnError(), kong.Vars{"cpus": strconv.Itoa(runtime.NumCPU())})
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kctx.BindTo(ctx, (*context.Context)(nil))
	kctx.Bind(log)
	if err := kctx.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "floodbench %s: %v\n", kctx.Command(), err)
		os.Exit(1)
	}
}
