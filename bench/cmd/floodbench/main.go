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
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/redis/go-redis/v9"

	"floodgate/bench/benchmark"
	"floodgate/bench/faults"
	"floodgate/bench/limiterbench"
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

// ChaosCmd runs the fault suite.
type ChaosCmd struct {
	Stack
	ClusterBrokers    []string `name:"cluster-brokers" env:"FLOODGATE_CLUSTER_BROKERS" default:"127.0.0.1:29092,127.0.0.1:29192,127.0.0.1:29292" sep:"," help:"Brokers of the --cluster profile."`
	ClusterRedisAddrs []string `name:"cluster-redis-addrs" env:"FLOODGATE_CLUSTER_REDIS_ADDRS" default:"127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003,127.0.0.1:17004,127.0.0.1:17005,127.0.0.1:17006" sep:"," help:"Redis Cluster seeds of the --cluster profile."`
	Rate              float64  `name:"rate" default:"2000" help:"Background load, events/s."`
	Subjects          int      `name:"subjects" default:"300" help:"Subjects per scenario."`
	Kills             int      `name:"kills" default:"3" help:"SIGKILLs of an aggregator."`
	Only              []string `name:"only" sep:"," help:"Run only scenarios whose names contain these (baseline,sigkill,malformed,bad-rules,postgres,kafka,apply-error,crash-publish,rebuild-beside,retention-gap,topic-recreated,redis; cluster-baseline,cluster-sigkill,cluster-redis-failover,cluster-redis-kill,cluster-redis-kill-behind,cluster-kafka-kill, or cluster for them all). Default: all, the cluster ones when the cluster profile answers."`
	Out               string   `name:"out" default:"docs/faults.md" help:"Markdown file to write (empty: none)."`
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
	failed := 0
	for _, r := range rows {
		if !r.Pass {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d fault scenarios failed", failed, len(rows))
	}
	return nil
}

// BenchCmd runs the benchmark.
type BenchCmd struct {
	Stack
	benchmark.Options
	Out string `name:"out" default:"docs/benchmarks.md" help:"Markdown file whose summary block is rewritten (empty: none)."`
}

// Run runs the benchmark and writes the summary.
func (c *BenchCmd) Run(ctx context.Context, log *slog.Logger) error {
	return benchmark.Run(ctx, benchmark.Config{
		Bin: c.Bin, Repo: c.Repo, Brokers: c.Brokers, RedisAddr: c.RedisAddr, PostgresURL: c.PostgresURL,
		WorkDir: c.WorkDir, Options: c.Options, Out: c.Out, Logger: log,
	})
}

// LimiterCmd measures limiter lookups in process and over HTTP against the
// stack's Redis, under a throw-away key prefix.
type LimiterCmd struct {
	RedisAddr   string        `name:"redis-addr" env:"FLOODGATE_REDIS_ADDR" default:"127.0.0.1:16379"`
	KeyPrefix   string        `name:"key-prefix" default:"bench" help:"Prefix of the keys the run seeds (a timestamp is appended)."`
	Duration    time.Duration `name:"duration" default:"3s" help:"Length of each run."`
	Concurrency []int         `name:"concurrency" default:"1,16,64" sep:"," help:"Concurrent callers of each run."`
	Scenarios   []string      `name:"scenarios" default:"allowed,denied,strict" sep:"," help:"allowed, denied (denied and cached), strict (Take)."`
	Surfaces    []string      `name:"surfaces" default:"inproc,http" sep:"," help:"inproc (Limiter calls) and/or http (GET /v1/check, POST /v1/take on loopback)."`
	Markdown    bool          `name:"markdown" help:"Print a Markdown table (for docs/benchmarks.md)."`
}

// Run measures and prints.
func (c *LimiterCmd) Run(ctx context.Context, log *slog.Logger) error {
	rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr, PoolSize: 64, ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: -1})
	defer rdb.Close()
	res, err := limiterbench.Run(ctx, limiterbench.Config{
		Redis: rdb, KeyPrefix: fmt.Sprintf("%s-%d", c.KeyPrefix, time.Now().UnixNano()),
		Duration: c.Duration, Concurrency: c.Concurrency, Scenarios: c.Scenarios, Surfaces: c.Surfaces, Logger: log,
	})
	if err != nil {
		return err
	}
	if c.Markdown {
		limiterbench.WriteMarkdown(os.Stdout, res)
	} else {
		limiterbench.WriteText(os.Stdout, res)
	}
	return nil
}

type cli struct {
	Chaos   ChaosCmd   `cmd:"" help:"Fault suite → docs/faults.md."`
	Bench   BenchCmd   `cmd:"" help:"Benchmarks against Kafka's own tools → docs/benchmarks.md."`
	Limiter LimiterCmd `cmd:"" help:"Limiter lookups/s and latency (one of the benchmark's steps)."`
}

func main() {
	var c cli
	kctx := kong.Parse(&c, kong.Name("floodbench"), kong.UsageOnError())
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
