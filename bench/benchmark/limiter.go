package benchmark

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-dev/floodgate/bench/rlsload"
	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/stacktest/promtext"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// lookupRules are the limiter step's rules: one limit; the design notes'
// four limits on an IP and an e-mail; a strict rule whose limits are never
// reached, so every take admits and counts.
const lookupRules = `# make bench limiter step rules (generated).
rules:
  - name: bench-one
    action: bench_one
    kinds: [ip]
    limits: [100/m]
  - name: bench-four
    action: bench_four
    kinds: [ip, email]
    limits: [2/s, 5/m, 10/h, 100/d]
  - name: bench-strict
    action: bench_strict
    kinds: [email]
    limits: [1000000000/m, 1000000000/h]
    strict: true
  - name: bench-strict-two
    action: bench_strict2
    kinds: [ip, email]
    limits: [1000000000/m, 1000000000/h]
    strict: true
`

// lookupSubjects per scenario, drawn uniformly, so that no hot key
// flatters the figures.
const lookupSubjects = 10_000

// deniedEvents are applied per denied subject: over 10/h, so the deny
// outlasts the run.
const deniedEvents = 11

// Scenarios of the limiter step, keyed in Lookup.Scenario.
const (
	scNoop        = "noop"
	scAllowedOne  = "allowed-one"
	scAllowedFour = "allowed-four"
	scDenied      = "denied"
	scStrict      = "strict"
	scStrictTwo   = "strict-two"
	scHTTP        = "http-allowed"
	// envoyproxy/ratelimit on the strict take's requests (envoy.go), just
	// before the owner's takes and just after
	scEnvoy      = "envoy"
	scEnvoyAfter = "envoy-after"
	// the same takes answered by the partition owner (ownertakes.go), of
	// subjects it holds, and of subjects it has never seen
	scOwnerStrict     = "strict-owner"
	scOwnerStrictCold = "strict-owner-cold"
	// takes of an IP and an e-mail answered by two owners (ownertakes.go)
	scOwnerStrictTwo = "strict-owner-two"
)

// The requests of each scenario; the subject ranges do not overlap.
var (
	shapeOne    = rlsload.Shape{Domain: "bench_one", Kinds: []string{"ip"}, Subjects: lookupSubjects}
	shapeFour   = rlsload.Shape{Domain: "bench_four", Kinds: []string{"ip", "email"}, Subjects: lookupSubjects}
	shapeDenied = rlsload.Shape{Domain: "bench_four", Kinds: []string{"ip"}, Subjects: lookupSubjects, Base: 20_000}
	shapeStrict = rlsload.Shape{Domain: "bench_strict", Kinds: []string{"email"}, Subjects: lookupSubjects, Base: 40_000}
	// subjects the owner has never seen: a run of 3 s draws at most a
	// quarter of them, nearly all once (each concurrency has a range of
	// its own)
	shapeStrictCold = rlsload.Shape{Domain: "bench_strict", Kinds: []string{"email"}, Subjects: 150_000, Base: 1_000_000}
	// an IP and an e-mail: most often of two slots, as a strict login
	shapeStrictTwo = rlsload.Shape{Domain: "bench_strict2", Kinds: []string{"ip", "email"}, Subjects: lookupSubjects, Base: 60_000}
)

// Concurrencies of the closed-loop runs.
var lookupConcurrency = []int{1, 16, 64}

// Lookup is one run of the limiter or cluster step.
type Lookup struct {
	Scenario string // scNoop, scAllowedOne, ...
	Cluster  bool   // against the cluster profile
	rlsload.Result
	// CPU per lookup of each process (closed loops on the single-node
	// stack only).
	CPU []ProcCPU
	// FailedClosed counts the limiter's answers in the run that Redis did
	// not give in time or at all, denied by the failure mode (strict takes
	// always fail closed): floodgate_limiter_failure_mode_total{mode="closed"}.
	// They are among Unexpected.
	FailedClosed int64
	// Routes says how the takes of a run across two owners went.
	Routes string `json:",omitempty"`
}

// target is where a step's processes run: the single-node stack or the
// cluster profile.
type target struct {
	brokers []string
	redis   []string
	cluster bool
}

func (t target) redisArgs() []string {
	args := []string{"--redis-addr", strings.Join(t.redis, ",")}
	if t.cluster {
		args = append(args, "--redis-cluster")
	}
	return args
}

// limiterProc is a `floodgate limiter` process.
type limiterProc struct {
	*childproc.Proc
	http, rls string // addresses
	cmd       string
}

// metrics is the limiter's /metrics URL.
func (l *limiterProc) metrics() string { return "http://" + l.http + "/metrics" }

// startLimiter starts `floodgate limiter` on t with the RLS mode given and
// waits until it is ready (every partition's state loaded).
func (b *bench) startLimiter(ctx context.Context, t target, name, topic, prefix, rulesPath, mode string) (*limiterProc, error) {
	httpAddr, err := childproc.FreePort()
	if err != nil {
		return nil, err
	}
	rlsAddr, err := childproc.FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"limiter", "--http-addr", httpAddr, "--rls-addr", rlsAddr, "--rls-mode", mode,
		"--brokers", strings.Join(t.brokers, ","), "--topic", topic, "--key-prefix", prefix, "--rules", rulesPath}, t.redisArgs()...)
	p, err := childproc.Start(ctx, childproc.Config{Name: name, Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
	if err != nil {
		return nil, err
	}
	lp := &limiterProc{Proc: p, http: httpAddr, rls: rlsAddr, cmd: "floodgate " + strings.Join(args, " ")}
	if err := childproc.WaitHTTP(ctx, "http://"+httpAddr+"/readyz", time.Minute); err != nil {
		return nil, errors.Join(err, p.Stop(15*time.Second), fmt.Errorf("%s log: %s", name, p.Tail(5)))
	}
	return lp, nil
}

// stopProc stops a process and records its peak RSS under label.
func (b *bench) stopProc(p *childproc.Proc, label string) error {
	err := p.Stop(15 * time.Second)
	b.peak(label, p)
	return err
}

// limiter: Envoy RLS lookups against the no-op RLS server (the ceiling of
// the gRPC stack here), then against `floodgate limiter` processes: checks
// (allowed with one limit, allowed with four limits on two subjects,
// denied) with --rls-mode check, strict takes with --rls-mode take; each at
// c=1/16/64 and paced, plus allowed checks over HTTP /v1/check.
func (b *bench) limiter(ctx context.Context) error {
	t := target{brokers: b.cfg.Brokers, redis: []string{b.cfg.RedisAddr}}
	noop, err := b.noopRuns(ctx, lookupConcurrency, true)
	b.res.Lookups = append(b.res.Lookups, noop...)
	if err != nil {
		return err
	}
	topic, err := b.topic("lim")
	if err != nil {
		return err
	}
	rulesPath, set, err := b.writeLookupRules()
	if err != nil {
		return err
	}
	prefix := "bench" + b.id + "l"
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := stacktest.DeletePrefix(cctx, b.rdb, prefix); err != nil {
			b.log.Warn("bench: delete limiter keys", "err", err)
		}
	}()
	// Checks pace at half the no-op's c=16 rate: a rate the RPC stack
	// sustains with room, so latencies show the limiter's own work.
	rate := noopRate(noop, 16) / 2

	lim, err := b.startLimiter(ctx, t, "limiter-check", topic, prefix, rulesPath, "check")
	if err != nil {
		return err
	}
	b.res.LookupCmds = append(b.res.LookupCmds, lim.cmd)
	err = b.checkRuns(ctx, lim, topic, prefix, set, rate)
	if serr := b.stopProc(lim.Proc, "floodgate limiter --rls-mode check"); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}

	relay, err := b.startTakeRelay(ctx, t, topic, prefix, rulesPath)
	if err != nil {
		return err
	}
	lim, err = b.startLimiter(ctx, t, "limiter-take", topic, prefix, rulesPath, "take")
	if err != nil {
		return errors.Join(err, relay.Stop(15*time.Second))
	}
	b.res.LookupCmds = append(b.res.LookupCmds, lim.cmd)
	err = b.takeRuns(ctx, lim, relay)
	if serr := b.stopProc(lim.Proc, "floodgate limiter --rls-mode take"); err == nil {
		err = serr
	}
	if serr := relay.Stop(15 * time.Second); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	return b.ownerTakeRuns(ctx, t, rulesPath)
}

// startTakeRelay starts the live aggregator of the limiter's topic: its take
// relay publishes the strict takes' events, which the take script queues in
// Redis, so the takes' cost includes getting them to Kafka.
func (b *bench) startTakeRelay(ctx context.Context, t target, topic, prefix, rulesPath string) (*childproc.Proc, error) {
	if err := b.outputTopics(ctx, topic); err != nil {
		return nil, err
	}
	addr, err := childproc.FreePort()
	if err != nil {
		return nil, err
	}
	args := b.aggregatorArgs(t, topic, "bench-"+b.id+"-takes", prefix, rulesPath, addr)
	b.res.LookupCmds = append(b.res.LookupCmds, "floodgate "+strings.Join(args, " "))
	p, err := childproc.Start(ctx, childproc.Config{Name: "aggregator-takes", Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
	if err != nil {
		return nil, err
	}
	if err := childproc.WaitHTTP(ctx, "http://"+addr+"/healthz", time.Minute); err != nil {
		return nil, errors.Join(err, p.Stop(15*time.Second))
	}
	return p, nil
}

// writeLookupRules writes the limiter step's rules file and parses it.
func (b *bench) writeLookupRules() (string, *rules.Set, error) {
	set, err := rules.Parse([]byte(lookupRules))
	if err != nil {
		return "", nil, fmt.Errorf("limiter bench rules: %w", err)
	}
	path := filepath.Join(b.cfg.WorkDir, "lookup-rules.yaml")
	if err := os.WriteFile(path, []byte(lookupRules), 0o644); err != nil {
		return "", nil, err
	}
	return path, set, nil
}

// noopRuns measures the no-op RLS server, run as a process of its own
// (`floodbench rls-noop`), with the four-limit request shape (the largest
// check), closed loop at each concurrency and, if paced, at half its c=16
// rate.
func (b *bench) noopRuns(ctx context.Context, conc []int, paced bool) ([]Lookup, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("limiter bench: find floodbench: %w", err)
	}
	addr, err := childproc.FreePort()
	if err != nil {
		return nil, err
	}
	args := []string{"rls-noop", "--addr", addr}
	b.res.LookupCmds = append(b.res.LookupCmds, "floodbench "+strings.Join(args, " "))
	p, err := childproc.Start(ctx, childproc.Config{Name: "rls-noop", Bin: self, Args: args, LogDir: b.cfg.WorkDir})
	if err != nil {
		return nil, err
	}
	runs, err := b.rlsMeasure(ctx, p, addr, scNoop, false, shapeFour, rlsload.OK, conc, 0)
	if err == nil && paced {
		var more []Lookup
		more, err = b.rlsMeasure(ctx, p, addr, scNoop, false, shapeFour, rlsload.OK, nil, noopRate(runs, 16)/2)
		runs = append(runs, more...)
	}
	return runs, errors.Join(err, b.stopProc(p, "floodbench rls-noop"))
}

// rlsMeasure dials an RLS server, waits until it answers and measures one
// shape (measure).
func (b *bench) rlsMeasure(ctx context.Context, server *childproc.Proc, addr, scenario string, cluster bool, s rlsload.Shape, want rlsv3.RateLimitResponse_Code, conc []int, rate float64) ([]Lookup, error) {
	cl, err := rlsload.Dial(addr, runtime.NumCPU())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := cl.WaitReady(ctx, s, 30*time.Second); err != nil {
		return nil, err
	}
	return b.measure(ctx, server, "", scenario, cluster, cl.Op(s, want), conc, rate)
}

// noopRate is the no-op's closed-loop rate at concurrency c (0 if not
// measured).
func noopRate(runs []Lookup, c int) float64 {
	for _, r := range runs {
		if r.Scenario == scNoop && !r.Paced() && r.Concurrency == c {
			return r.PerSec
		}
	}
	return 0
}

// checkRuns: the denied subjects are put over their limit first (real
// events through live.Applier.Apply, as the aggregator applies them), and
// the runs start once the limiter denies every one of them from memory.
func (b *bench) checkRuns(ctx context.Context, lim *limiterProc, topic, prefix string, set *rules.Set, rate float64) error {
	if err := b.seedDenied(ctx, topic, prefix, set); err != nil {
		return err
	}
	cl, err := rlsload.Dial(lim.rls, runtime.NumCPU())
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.WaitCode(ctx, shapeDenied, rlsload.OverLimit, time.Minute); err != nil {
		return fmt.Errorf("denied subjects: %w", err)
	}
	for _, sc := range []struct {
		name  string
		shape rlsload.Shape
		want  rlsv3.RateLimitResponse_Code
	}{
		{scAllowedOne, shapeOne, rlsload.OK},
		{scAllowedFour, shapeFour, rlsload.OK},
		{scDenied, shapeDenied, rlsload.OverLimit},
	} {
		runs, err := b.measure(ctx, lim.Proc, lim.metrics(), sc.name, false, cl.Op(sc.shape, sc.want), lookupConcurrency, rate)
		b.res.Lookups = append(b.res.Lookups, runs...)
		if err != nil {
			return err
		}
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	runs, err := b.measure(ctx, lim.Proc, lim.metrics(), scHTTP, false, rlsload.HTTPCheck(client, "http://"+lim.http, shapeFour, http.StatusOK), lookupConcurrency, 0)
	b.res.Lookups = append(b.res.Lookups, runs...)
	return err
}

// takeRuns: strict takes (they admit and count in Redis), paced at half
// their own c=16 rate: the no-op's would only measure a growing queue.
func (b *bench) takeRuns(ctx context.Context, lim *limiterProc, relay *childproc.Proc) error {
	cl, err := rlsload.Dial(lim.rls, runtime.NumCPU())
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.WaitReady(ctx, shapeStrict, 30*time.Second); err != nil {
		return err
	}
	op := cl.Op(shapeStrict, rlsload.OK)
	agg := cpuMeter{cpuRelay, pidCPU(relay.Pid())}
	runs, err := b.measure(ctx, lim.Proc, lim.metrics(), scStrict, false, op, lookupConcurrency, 0, agg)
	b.res.Lookups = append(b.res.Lookups, runs...)
	if err != nil {
		return err
	}
	var c16 float64
	for _, r := range runs {
		if r.Concurrency == 16 {
			c16 = r.PerSec
		}
	}
	runs, err = b.measure(ctx, lim.Proc, lim.metrics(), scStrict, false, op, nil, c16/2, agg)
	b.res.Lookups = append(b.res.Lookups, runs...)
	if err != nil {
		return err
	}
	// Takes of two slots: a reservation in each, in turn, and each slot's
	// event queued with its count. Closed loops only, to keep the step short.
	if err := cl.WaitReady(ctx, shapeStrictTwo, 30*time.Second); err != nil {
		return err
	}
	runs, err = b.measure(ctx, lim.Proc, lim.metrics(), scStrictTwo, false, cl.Op(shapeStrictTwo, rlsload.OK), []int{16, 64}, 0, agg)
	b.res.Lookups = append(b.res.Lookups, runs...)
	return err
}

// measure runs op closed-loop at each concurrency, then paced at rate (if
// positive), and returns the runs done. A closed loop against server on
// the single-node stack also reports the CPU each process spent per lookup:
// its CPU time over the run (warm-up included) ÷ (lookups/s × the run's
// wall time). With the server's metrics URL (a limiter's), each run counts
// the answers its failure mode denied.
func (b *bench) measure(ctx context.Context, server *childproc.Proc, metrics, scenario string, cluster bool, op rlsload.Op, conc []int, rate float64, extra ...cpuMeter) ([]Lookup, error) {
	var meters []cpuMeter
	if server != nil && !cluster {
		meters = append(b.lookupMeters(server), extra...)
	}
	return b.measureWith(ctx, meters, metrics, scenario, cluster, op, conc, rate)
}

// measureWith is measure with the processes whose CPU each closed loop
// reports given (none: no CPU figures).
func (b *bench) measureWith(ctx context.Context, meters []cpuMeter, metrics, scenario string, cluster bool, op rlsload.Op, conc []int, rate float64) ([]Lookup, error) {
	cfgs := make([]rlsload.Config, 0, len(conc)+1)
	for _, c := range conc {
		cfgs = append(cfgs, rlsload.Config{Op: op, Concurrency: c, Duration: b.cfg.LimiterD})
	}
	if rate > 0 {
		cfgs = append(cfgs, rlsload.Config{Op: op, Rate: rate, Duration: b.cfg.LimiterD})
	}
	var runs []Lookup
	for _, cfg := range cfgs {
		before, merr := readMeters(ctx, meters)
		closed0, cerr := failedClosed(ctx, metrics)
		start := time.Now()
		r, err := rlsload.Run(ctx, cfg)
		if err != nil {
			return runs, fmt.Errorf("%s %s: %w", scenario, r.Load(), err)
		}
		closed1, cerr1 := failedClosed(ctx, metrics)
		if cerr = errors.Join(cerr, cerr1); cerr != nil {
			b.log.Warn("bench: no count of answers failed closed", "scenario", scenario, "err", cerr)
		}
		var cpu []ProcCPU
		if after, aerr := readMeters(ctx, meters); merr == nil && aerr == nil && !r.Paced() {
			cpu = perOp(meters, before, after, r.PerSec*time.Since(start).Seconds())
		} else if merr != nil || aerr != nil {
			b.log.Warn("bench: no CPU per lookup", "scenario", scenario, "err", errors.Join(merr, aerr))
		}
		closed := int64(closed1 - closed0)
		b.log.Info("bench: lookups", "scenario", scenario, "cluster", cluster, "load", r.Load(), "per_sec", int(r.PerSec),
			"p99", r.P99, "unexpected", r.Unexpected, "failed_closed", closed, "errors", r.Errors)
		runs = append(runs, Lookup{Scenario: scenario, Cluster: cluster, Result: r, CPU: cpu, FailedClosed: closed})
	}
	return runs, nil
}

// failedClosed reads the limiter's count of answers its failure mode
// denied (0 without a URL).
func failedClosed(ctx context.Context, metrics string) (float64, error) {
	if metrics == "" {
		return 0, nil
	}
	s, err := promtext.Scrape(ctx, metrics)
	if err != nil {
		return 0, err
	}
	return s.Sum("floodgate_limiter_failure_mode_total", `mode="closed"`), nil
}

// seedDenied applies deniedEvents events for every subject of shapeDenied
// through live.Applier.Apply, the aggregator's own write: counters, deny
// records, decision state and change entries, which the limiter follows.
func (b *bench) seedDenied(ctx context.Context, topic, prefix string, set *rules.Set) error {
	parts := b.cfg.PartCount
	store, err := window.NewStore(b.rdb, window.StoreConfig{Prefix: prefix, Partitions: func() int { return parts }})
	if err != nil {
		return err
	}
	applier, err := live.NewApplier(store, live.ApplierConfig{})
	if err != nil {
		return err
	}
	now := time.Now()
	byPart := map[int][]consume.Record{}
	for i := range shapeDenied.Subjects {
		for _, k := range shapeDenied.Kinds {
			sub := window.Subject{Action: shapeDenied.Domain, Kind: k, Subject: rlsload.Subject(k, shapeDenied.Base+i)}
			p := window.Partition(sub, parts)
			for range deniedEvents {
				byPart[p] = append(byPart[p], consume.Record{Offset: int64(len(byPart[p])), Event: event.Event{
					V: event.Version, ID: event.NewID(), Action: sub.Action, Kind: sub.Kind, Subject: sub.Subject, TS: now, N: 1,
				}})
			}
		}
	}
	for p, recs := range byPart {
		batch := consume.Batch{Topic: topic, Partition: p, First: 0, Last: int64(len(recs) - 1), Records: recs}
		if _, err := applier.Apply(ctx, "bench-"+b.id+"-seed", batch, set, now, nil); err != nil {
			return fmt.Errorf("seed denied subjects partition=%d: %w", p, err)
		}
	}
	return nil
}
