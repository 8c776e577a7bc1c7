package benchmark

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/stacktest/kafkatopics"
	"github.com/floodgate-dev/floodgate/internal/stacktest/promtext"
	"github.com/floodgate-dev/floodgate/migrations"
)

// Options are the benchmark's tunables (flags of floodbench bench).
type Options struct {
	Events        int           `name:"events" default:"200000" help:"Events per throughput run."`
	Runs          int           `name:"runs" default:"3" help:"Runs per throughput figure (the median is reported)."`
	SteadyEvents  int           `name:"steady-events" default:"3000000" help:"Events per run of the live-steady step: the live aggregator and ConsumerPerformance, alternated, on a topic long enough that neither's start-up dominates; each is timed from a quarter of the events to the last (0 skips it)."`
	SteadyRuns    int           `name:"steady-runs" default:"5" help:"Runs of the live-steady step (each tool alternated; min, median and max reported)."`
	ScaleEvents   int           `name:"scale-events" default:"1000000" help:"Events of the scale-out step's topic (24 partitions, uniform mix), read by 1, 2 and 4 capped members."`
	ScaleCPU      float64       `name:"scale-cpu" default:"0.2" help:"CPU cap of each aggregator process in the scale-out step, in cores (4 members and the capped Redis primaries must fit the machine)."`
	ScaleRedisCPU float64       `name:"scale-redis-cpu" default:"0.2" help:"CPU cap of each Redis primary of the cluster profile during the scale-out step, in cores."`
	Subjects      int           `name:"subjects" default:"10000" help:"Distinct subjects of the synthetic load (Zipf)."`
	Probes        int           `name:"probes" default:"200" help:"Deny probes of each latency run (the p99 of 40 is their largest; of 200, the third largest)."`
	LegacyRev     string        `name:"legacy-rev" default:"7e886ae~1" help:"Git revision of the aggregator the live figures are compared with (issue 11's baseline: the commit before adaptive batching and headroom); empty skips it."`
	LatFractions  []float64     `name:"latency-at" sep:"," default:"0.1,0.5,0.8" help:"Shares of the live maximum the event-to-deny latency is measured at."`
	LatMax        float64       `name:"latency-max" help:"Live maximum (events/s) the latency shares are taken of, instead of the live step's figure: to run --only latency on its own."`
	OwnerSubjects int           `name:"owner-subjects" default:"1000000" help:"Distinct subjects of the owner-memory step (a write-back owner's RSS per resident subject)."`
	LatE2E        float64       `name:"latency-e2e" help:"End-to-end maximum (events/s) the latency shares are taken of, instead of measuring it: to compare binaries at the same offered rates in separate runs."`
	LimiterD      time.Duration `name:"limiter-duration" default:"3s" help:"Length of each limiter run."`
	SkipSlow      bool          `name:"skip-roller" help:"Skip the roller and one-year query step."`
	PartCount     int           `name:"partitions" default:"12" help:"Partitions of the benchmark topics (as floodgate.events)."`
	Settle        time.Duration `name:"settle" default:"2m" help:"Before the first step, wait up to this long for the 1-minute load average to fall below the number of cores: the profiles scripts/bench has just started leave it high (0: do not wait)."`
	// The sketches step (unique visitors in history).
	SketchEvents   int `name:"sketch-events" default:"200000" help:"Visits the history sink applies in the sketches step (batches of 10 000)."`
	SketchKeys     int `name:"sketch-keys" default:"5000" help:"Links of the sketches step (Zipf: a few hot ones)."`
	SketchVisitors int `name:"sketch-visitors" default:"200000" help:"Distinct visitors the sketches step draws from."`
	// Only runs the named steps (e.g. --only sketches): each step on its
	// own, at small sizes, without the whole run. Steps that read an
	// earlier step's topic (live, history, java-consumer) need producer;
	// backtest makes its own topic and ceiling when run alone.
	Only []string `name:"only" sep:"," help:"Run only these steps: producer, java-producer, java-consumer, live, live-steady, history, backtest, latency, limiter, cluster, scale-out, roller, sketches, owner-memory, secure (needs producer and live for its ratios)."`
}

// Config configures Run.
type Config struct {
	Bin, Repo, RedisAddr, PostgresURL, WorkDir, Out string
	Brokers                                         []string
	// The cluster profile (scripts/stack env --cluster): its brokers and
	// Redis Cluster seeds. When it does not answer, the cluster step is
	// skipped with a note in the summary.
	ClusterBrokers, ClusterRedisAddrs []string
	// The secure profile (scripts/stack env --secure): its directory
	// (CA, secret files), broker and Redis. Empty SecureDir: the secure
	// step fails with a note.
	SecureDir, SecureBrokers, SecureRedisAddr string
	Options
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.Bin == "" || c.Repo == "" || len(c.Brokers) == 0 || c.RedisAddr == "" || c.PostgresURL == "" {
		return errors.New("bench config: bin, repo, brokers, redis address and postgres url are required")
	}
	if c.Events <= 0 || c.Runs <= 0 {
		return errors.New("bench config: events and runs must be positive")
	}
	if c.SketchEvents <= 0 || c.SketchKeys < 2 || c.SketchVisitors <= 0 {
		return errors.New("bench config: sketch events and visitors must be positive, sketch keys at least 2")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.WorkDir == "" {
		d, err := os.MkdirTemp("", "floodgate-bench-")
		if err != nil {
			return err
		}
		c.WorkDir = d
	}
	return nil
}

// Producer settings shared by floodgate produce and ProducerPerformance.
const (
	acks        = "all"
	lingerMS    = 5
	batchBytes  = 1 << 20 // producer.DefaultBatchBytes: kafka-go caps a batch by bytes like Java's batch.size
	batchEvents = 5000
	compression = "lz4"
)

// Results is everything measured, for the report.
type Results struct {
	Machine   harness.Machine
	LoadStart string
	// Settled is how long the run waited for the load to settle first.
	Settled     time.Duration
	LoadEnd     string
	Events      int
	Runs        int
	RecordSize  int
	Produce     []float64 // events/s per run
	ProduceCmd  string
	JavaProduce []float64
	JavaCmd     string
	JavaConsume []float64 // fetch.nMsg.sec
	JavaConsCmd string
	Live        []float64 // LiveNow.Rate
	LiveNow     liveFigures
	LiveLegacy  liveFigures // the aggregator of Options.LegacyRev
	LegacyRev   string
	LiveDedup   liveFigures // --dedup 10m
	LiveThrough liveFigures // --checkpoint-interval 0: write-through, as before write-back
	// LiveCold and LiveColdThrough: the same, on cold subjects spread
	// uniformly (ColdSubjects of them), write-back and write-through.
	LiveCold, LiveColdThrough liveFigures
	ColdSubjects              int
	// LiveSteady and JavaSteady: the live aggregator (write-back) and
	// ConsumerPerformance alternated on a topic of SteadyEvents events.
	LiveSteady   liveFigures
	JavaSteady   []float64
	SteadyEvents int
	SteadyRuns   int
	// FetchSteady and DecodeSteady: the same topic read by the
	// aggregator's Fetcher alone, records dropped or decoded (fetchonly.go).
	FetchSteady, DecodeSteady []float64
	// SteadyCPU: the CPU per event of each kind of steady-state run.
	SteadyCPU    struct{ Java, Live, Fetch, Decode SteadyCPU }
	History      []float64
	HistoryRows  []float64 // rows/s
	HistoryDedup HistoryDedup
	Lat          []Latency // at Options.LatFractions of the end-to-end maximum
	// LatE2EMax is the end-to-end maximum (events/s the aggregator consumed
	// with the producer, broker and limiter beside it) the shares are of.
	LatE2EMax  float64
	Lookups    []Lookup // limiter step, then the cluster step's
	LookupCmds []string // the no-op server's and the limiters' command lines
	RollerRows int64
	RollerTook time.Duration
	RollerCmd  string
	RollerErr  string
	Curve      []float64 // ms per query
	CurveCmd   string
	CurveErr   string
	Cluster    ClusterFigures
	Scale      ScaleFigures
	Sketches   []SketchRun // without, then with unique-visitor sketches
	Owner      *OwnerMemory
	SketchOpts Options // the run's options: the sketches step's sizes, the limiter step's duration
	RSS        map[string]int64
	Errors     []string
	// The secure step: producer and live aggregator events/s per run on
	// the secure profile.
	SecureProduce, SecureLive []float64
	// Allowed checks at c=16 on a plain limiter and on one serving RLS
	// over TLS on the secure profile, measured in the secure step.
	SecurePlainChecks, SecureChecks []Lookup

	Backtest     backtestFigures
	BacktestBase backtestFigures // with --baseline
}

type bench struct {
	cfg    Config
	id     string
	kafka  *kafkatopics.Client
	java   *harness.JavaTools
	rdb    *redis.Client
	pool   *pgxpool.Pool
	log    *slog.Logger
	res    *Results
	rules  string
	topics []string
}

// Run runs every step and rewrites the summary block of cfg.Out.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	java, err := harness.NewJavaTools()
	if err != nil {
		return err
	}
	b := &bench{
		cfg: cfg, id: strconv.FormatInt(time.Now().Unix()%1_000_000_000, 36),
		kafka: kafkatopics.New(cfg.Brokers), java: java, log: cfg.Logger,
		res: &Results{Events: cfg.Events, Runs: cfg.Runs, RSS: map[string]int64{}, SketchOpts: cfg.Options},
	}
	b.res.Settled = b.settle(ctx)
	b.res.LoadStart = harness.LoadAvg()
	b.rdb = redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
	defer b.rdb.Close()
	if b.pool, err = pgxpool.New(ctx, cfg.PostgresURL); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer b.pool.Close()
	b.rules = filepath.Join(cfg.WorkDir, "bench-rules.yaml")
	if err := os.WriteFile(b.rules, []byte(benchRules), 0o644); err != nil {
		return err
	}
	defer b.cleanup()

	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"producer", b.producer},
		{"java-producer", b.javaProducer},
		{"java-consumer", b.javaConsumer},
		{"live", b.live},
		{"live-steady", b.liveSteady},
		{"history", b.history},
		{"backtest", b.backtest},
		{"latency", b.latency},
		{"limiter", b.limiter},
		{"cluster", b.cluster},
		{"scale-out", b.scaleOut},
		{"roller", b.roller},
		{"sketches", b.sketches},
		{"owner-memory", b.ownerMemory},
		{"secure", b.secure},
	}
	for _, st := range steps {
		if st.name == "roller" && cfg.SkipSlow {
			continue
		}
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, st.name) {
			continue
		}
		b.log.Info("bench: step", "step", st.name, "load1", harness.Load1())
		if err := st.fn(ctx); err != nil {
			b.log.Error("bench: step failed", "step", st.name, "err", err)
			b.res.Errors = append(b.res.Errors, st.name+": "+err.Error())
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	b.res.LoadEnd = harness.LoadAvg()
	b.res.Machine = harness.DescribeMachine(cfg.Repo)
	body := Render(b.res)
	fmt.Println(body)
	if cfg.Out != "" {
		return harness.ReplaceBlock(cfg.Out, "bench:summary", "Benchmarks", body)
	}
	return nil
}

const benchRules = `# make bench rules (generated): the example rules' shapes on bench actions.
rules:
  - name: bench-visit
    action: bench_visit
    kinds: [ip]
    limits: [50/s, 600/m, 20000/h]
    shadow: true
  - name: bench-login
    action: bench_login
    kinds: [ip]
    limits: [2/s, 5/m, 10/h, 100/d]
  - name: bench-probe
    action: bench_probe
    kinds: [ip]
    limits: [2/m]
`

func (b *bench) topic(name string) (string, error) {
	t := "floodgate.bench." + b.id + "." + name
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.kafka.CreateTopic(ctx, t, b.cfg.PartCount); err != nil {
		return "", err
	}
	b.topics = append(b.topics, t)
	return t, nil
}

// outputTopics creates the dead-letter and decisions topics of an events
// topic (the aggregator requires both); they are deleted with the others.
func (b *bench) outputTopics(ctx context.Context, events string) error {
	for _, t := range []string{events + ".dlq", events + ".decisions"} {
		if slices.Contains(b.topics, t) {
			continue
		}
		if err := b.kafka.CreateTopic(ctx, t, 1); err != nil {
			return err
		}
		b.topics = append(b.topics, t)
	}
	return nil
}

func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if len(b.topics) > 0 {
		if err := b.kafka.DeleteTopics(ctx, b.topics...); err != nil {
			b.log.Warn("bench: delete topics", "err", err)
		}
	}
	if err := stacktest.DeletePrefix(ctx, b.rdb, "bench"+b.id); err != nil {
		b.log.Warn("bench: delete redis keys", "err", err)
	}
	for i := 0; i < b.cfg.Runs+2; i++ {
		_ = stacktest.DeletePrefix(ctx, b.rdb, fmt.Sprintf("bench%sr%d", b.id, i))
	}
	if _, err := b.pool.Exec(ctx, `DELETE FROM floodgate.consumer_offsets WHERE consumer_group LIKE $1`, "bench-"+b.id+"-%"); err != nil {
		b.log.Warn("bench: delete offsets", "err", err)
	}
}

func (b *bench) peak(name string, p *childproc.Proc) {
	if p != nil && p.PeakRSS() > b.res.RSS[name] {
		b.res.RSS[name] = p.PeakRSS()
	}
}

var reProduced = regexp.MustCompile(`acknowledged in \S+ \(([\d.]+)/s\)`)

func (b *bench) produceArgs(brokers []string, topic string, n int, seed int) []string {
	return []string{"produce", "--brokers", strings.Join(brokers, ","), "--topic", topic, "--no-create-topics",
		"--count", strconv.Itoa(n), "--subjects", strconv.Itoa(b.cfg.Subjects), "--actions", "bench_visit,bench_login",
		"--kind", "ip", "--seed", strconv.Itoa(seed), "--acks", acks, "--compression", compression,
		"--linger", strconv.Itoa(lingerMS) + "ms", "--batch-size", strconv.Itoa(batchEvents), "--progress", "0"}
}

// producer: floodgate produce --count N into a fresh topic, Runs times.
// The first topic is the pre-filled input of the consumer runs.
func (b *bench) producer(ctx context.Context) error {
	for i := 0; i < b.cfg.Runs; i++ {
		t, err := b.topic("p" + strconv.Itoa(i))
		if err != nil {
			return err
		}
		args := b.produceArgs(b.cfg.Brokers, t, b.cfg.Events, i+1)
		b.res.ProduceCmd = "floodgate " + strings.Join(args, " ")
		start := time.Now()
		p, err := childproc.Run(ctx, childproc.Config{Name: "produce-" + strconv.Itoa(i), Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
		wall := time.Since(start)
		b.peak("floodgate produce", p)
		if err != nil {
			return err
		}
		b.res.Produce = append(b.res.Produce, producedRate(p, b.cfg.Events, wall))
	}
	// The record size of the Java runs: the mean value size of our events.
	var total, n int
	start, _ := b.kafka.StartOffsets(ctx, b.topics[0])
	to := map[int]int64{}
	for p, s := range start {
		to[p] = s + 20
	}
	err := b.kafka.ReadRange(ctx, b.topics[0], start, to, func(m kafkaMessage) { total += len(m.Value); n++ })
	if err != nil || n == 0 {
		return fmt.Errorf("sample event sizes: %v (%d read)", err, n)
	}
	b.res.RecordSize = (total + n/2) / n
	return nil
}

func (b *bench) javaProducer(ctx context.Context) error {
	if b.res.RecordSize == 0 {
		b.res.RecordSize = 170
	}
	for i := 0; i < b.cfg.Runs; i++ {
		t, err := b.topic("j" + strconv.Itoa(i))
		if err != nil {
			return err
		}
		r, err := b.java.ProducerPerformance(ctx, "--topic", t, "--num-records", strconv.Itoa(b.cfg.Events),
			"--record-size", strconv.Itoa(b.res.RecordSize), "--throughput", "-1",
			"--producer-props", "bootstrap.servers="+strings.Join(b.cfg.Brokers, ","), "acks="+acks,
			"linger.ms="+strconv.Itoa(lingerMS), "batch.size="+strconv.Itoa(batchBytes), "compression.type="+compression)
		b.res.JavaCmd = strings.Replace(r.CommandLine, b.java.Classpath, "$FLOODGATE_KAFKA_CLASSPATH", 1)
		if err != nil {
			return err
		}
		b.res.JavaProduce = append(b.res.JavaProduce, r.PerSec)
	}
	return nil
}

func (b *bench) javaConsumer(ctx context.Context) error {
	if len(b.topics) == 0 {
		return errors.New("no pre-filled topic")
	}
	for i := 0; i < b.cfg.Runs; i++ {
		r, err := b.javaConsumeOnce(ctx, b.topics[0], b.cfg.Events, strconv.Itoa(i))
		b.res.JavaConsCmd = r.CommandLine
		if err != nil {
			return err
		}
		b.res.JavaConsume = append(b.res.JavaConsume, r.FetchPerSec)
	}
	return nil
}

// javaConsumeOnce runs ConsumerPerformance over events of topic in a fresh
// group: its fetch.nMsg.sec, and its command line for the report.
func (b *bench) javaConsumeOnce(ctx context.Context, topic string, events int, run string) (harness.ConsumerPerfResult, error) {
	r, err := b.java.ConsumerPerformance(ctx, "--bootstrap-server", strings.Join(b.cfg.Brokers, ","),
		"--topic", topic, "--messages", strconv.Itoa(events), "--timeout", "60000",
		"--group", fmt.Sprintf("bench-%s-java-%s", b.id, run))
	r.CommandLine = strings.Replace(r.CommandLine, b.java.Classpath, "$FLOODGATE_KAFKA_CLASSPATH", 1)
	return r, err
}

// javaConsumeSteady is javaConsumeOnce timed over its steady intervals
// (harness.ConsumerPerformanceSteady).
func (b *bench) javaConsumeSteady(ctx context.Context, topic string, events int, run string) (harness.ConsumerPerfResult, error) {
	r, err := b.java.ConsumerPerformanceSteady(ctx, int64(events), "--bootstrap-server", strings.Join(b.cfg.Brokers, ","),
		"--topic", topic, "--messages", strconv.Itoa(events), "--timeout", "60000",
		"--group", fmt.Sprintf("bench-%s-java-%s", b.id, run))
	r.CommandLine = strings.Replace(r.CommandLine, b.java.Classpath, "$FLOODGATE_KAFKA_CLASSPATH", 1)
	return r, err
}

// liveSteady: the live aggregator (write-back) and ConsumerPerformance,
// alternated, on a topic of SteadyEvents events of the same mix. A 200k-event
// run is mostly start-up on both sides — the JVM warming up, a fresh group
// loading the copies of every subject — so this is the ratio of the two
// once warm.
func (b *bench) liveSteady(ctx context.Context) error {
	if b.cfg.SteadyEvents <= 0 {
		return nil
	}
	t, err := b.topic("steady")
	if err != nil {
		return err
	}
	args := b.produceArgs(b.cfg.Brokers, t, b.cfg.SteadyEvents, 98)
	if _, err := childproc.Run(ctx, childproc.Config{Name: "produce-steady", Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir}); err != nil {
		return err
	}
	b.res.SteadyEvents, b.res.SteadyRuns = b.cfg.SteadyEvents, b.cfg.SteadyRuns
	cpu := &b.res.SteadyCPU
	for i := 0; i < max(b.cfg.SteadyRuns, 1); i++ {
		var jr harness.ConsumerPerfResult
		broker, err := b.brokerSpan(ctx, func() (err error) {
			jr, err = b.javaConsumeSteady(ctx, t, b.cfg.SteadyEvents, "steady-"+strconv.Itoa(i))
			return err
		})
		if err != nil {
			return err
		}
		// The tool's rate over its steady intervals; its CPU is the whole
		// JVM's (start-up included), which no interval line reports.
		b.res.JavaSteady = append(b.res.JavaSteady, jr.SteadyPerSec)
		cpu.Java.add(perEvent(jr.CPU, b.cfg.SteadyEvents), perEvent(broker, b.cfg.SteadyEvents), 0)
		var f liveFigures
		broker, err = b.brokerSpan(ctx, func() (err error) {
			f, err = b.liveRunOn(ctx, t, b.cfg.SteadyEvents, fmt.Sprintf("%dsteady", i), b.cfg.Bin, nil)
			return err
		})
		if err != nil {
			return err
		}
		b.res.LiveSteady.add(f)
		if len(f.Agg) > 0 && len(f.CPU) > 0 {
			cpu.Live.add(f.Agg[0], perEvent(broker, b.cfg.SteadyEvents), f.CPU[0])
		}
		for _, v := range []struct {
			decode bool
			into   *[]float64
			cpu    *SteadyCPU
		}{{false, &b.res.FetchSteady, &cpu.Fetch}, {true, &b.res.DecodeSteady, &cpu.Decode}} {
			rate, err := b.fetchOnlyCPU(ctx, t, v.decode, v.cpu)
			if err != nil {
				return err
			}
			*v.into = append(*v.into, rate)
		}
	}
	return nil
}

// live: a fresh `floodgate aggregator --no-history` group over the
// pre-filled topic; events/s from its first applied batch to its last. The
// first run is followed by one of the aggregator as issue 11 measured it
// (built from Options.LegacyRev: fixed 50 ms batches, every touched subject
// re-evaluated, decisions published inline) and one with --dedup, so that
// their Redis cost per event is measured in the same run on the same topic.
func (b *bench) live(ctx context.Context) error {
	if len(b.topics) == 0 {
		return errors.New("no pre-filled topic")
	}
	defer func() { b.res.Live = b.res.LiveNow.Rate }()
	legacy, err := b.legacyBin(ctx)
	if err != nil {
		b.res.Errors = append(b.res.Errors, fmt.Sprintf("legacy aggregator (%s): %v", b.cfg.LegacyRev, err))
	}
	for i := 0; i < b.cfg.Runs; i++ {
		for _, v := range []struct {
			name, bin string
			args      []string
			into      *liveFigures
		}{
			{"", b.cfg.Bin, nil, &b.res.LiveNow},
			{"through", b.cfg.Bin, throughArgs, &b.res.LiveThrough},
			{"legacy", legacy, nil, &b.res.LiveLegacy},
			{"dedup", b.cfg.Bin, dedupArgs, &b.res.LiveDedup},
		} {
			if v.name != "" && v.name != "through" && i > 0 || v.bin == "" {
				continue // one run of each comparison is enough
			}
			f, err := b.liveRun(ctx, fmt.Sprintf("%d%s", i, v.name), v.bin, v.args)
			if err != nil {
				return err
			}
			v.into.add(f)
		}
	}
	return b.liveCold(ctx)
}

// coldSubjects is how many subjects the cold run spreads its events over.
const coldSubjects = 1_000_000

// liveCold: the live runs again, once write-back and once write-through,
// on a topic of cold subjects drawn uniformly: every event a subject no
// cache holds, the case a Zipf mix hides.
func (b *bench) liveCold(ctx context.Context) error {
	t, err := b.topic("cold")
	if err != nil {
		return err
	}
	args := b.produceArgs(b.cfg.Brokers, t, b.cfg.Events, 99)
	for i, a := range args {
		if a == "--subjects" {
			args[i+1] = strconv.Itoa(coldSubjects)
		}
	}
	args = append(args, "--uniform")
	if _, err := childproc.Run(ctx, childproc.Config{Name: "produce-cold", Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir}); err != nil {
		return err
	}
	b.res.ColdSubjects = coldSubjects
	for _, v := range []struct {
		name string
		args []string
		into *liveFigures
	}{{"cold", nil, &b.res.LiveCold}, {"coldthrough", throughArgs, &b.res.LiveColdThrough}} {
		f, err := b.liveRunOn(ctx, t, b.cfg.Events, v.name, b.cfg.Bin, v.args)
		if err != nil {
			return err
		}
		v.into.add(f)
	}
	return nil
}

// throughArgs turn write-back off: every batch written through to Redis,
// alternated with the write-back runs so that drift hits both.
var throughArgs = []string{"--checkpoint-interval", "0"}

// dedupArgs turn dedup on for the dedup run.
var dedupArgs = []string{"--dedup", "10m"}

// legacyBin builds cmd/floodgate as of Options.LegacyRev (git archive of
// the repository, so no worktree is left behind) into the work directory.
func (b *bench) legacyBin(ctx context.Context) (string, error) {
	if b.cfg.LegacyRev == "" {
		return "", nil
	}
	src := filepath.Join(b.cfg.WorkDir, "legacy-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", b.cfg.Repo, b.cfg.LegacyRev, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %w: %s", b.cfg.LegacyRev, err, out)
	}
	bin := filepath.Join(b.cfg.WorkDir, "floodgate-legacy")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/floodgate")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build at %s: %w: %s", b.cfg.LegacyRev, err, out)
	}
	b.res.LegacyRev = b.cfg.LegacyRev
	return bin, nil
}

// liveFigures are the live runs of one setting.
type liveFigures struct {
	Rate, Cmds, CPU, Bytes []float64 // events/s; Redis commands, CPU µs per event; bytes per subject
	Agg                    []float64 // the aggregator's CPU µs per event, start-up to the last event counted
	Subjects               []int
	Cmd                    string
}

func (l *liveFigures) add(o liveFigures) {
	l.Rate = append(l.Rate, o.Rate...)
	l.Cmds = append(l.Cmds, o.Cmds...)
	l.CPU = append(l.CPU, o.CPU...)
	l.Agg = append(l.Agg, o.Agg...)
	l.Bytes = append(l.Bytes, o.Bytes...)
	l.Subjects = append(l.Subjects, o.Subjects...)
	l.Cmd = o.Cmd
}

func (b *bench) liveRun(ctx context.Context, run, bin string, extra []string) (liveFigures, error) {
	return b.liveRunOn(ctx, b.topics[0], b.cfg.Events, run, bin, extra)
}

// liveRunOn is liveRun over a topic of events events.
func (b *bench) liveRunOn(ctx context.Context, topic string, events int, run, bin string, extra []string) (liveFigures, error) {
	var f liveFigures
	prefix := "bench" + b.id + "r" + run
	addr, err := childproc.FreePort()
	if err != nil {
		return f, err
	}
	single := target{brokers: b.cfg.Brokers, redis: []string{b.cfg.RedisAddr}}
	args := append(b.aggregatorArgs(single, topic, "bench-"+b.id+"-live-"+run, prefix, b.rules, addr), extra...)
	if bin != b.cfg.Bin {
		// The legacy binary predates --live-group (it reads --group, which
		// today's keeps as an alias).
		for i, a := range args {
			if a == "--live-group" {
				args[i] = "--group"
			}
		}
	}
	f.Cmd = "floodgate " + strings.Join(args, " ")
	if err := b.outputTopics(ctx, topic); err != nil {
		return f, err
	}
	before, err := harness.ReadRedisInfo(ctx, b.rdb)
	if err != nil {
		return f, err
	}
	p, err := childproc.Start(ctx, childproc.Config{Name: "aggregator-live-" + run, Bin: bin, Args: args, LogDir: b.cfg.WorkDir})
	if err != nil {
		return f, err
	}
	// CPU and Redis are read at the steady window's start and end: the
	// figures per event are of the events counted in between.
	var agg0 time.Duration
	var red0 harness.RedisInfo
	var merr error
	win, err := waitWindow(ctx, []*childproc.Proc{p}, []string{"http://" + addr + "/metrics"}, "floodgate_aggregator_messages_in_total", float64(events), steadyFrom, func() {
		var aerr, rerr error
		agg0, aerr = harness.ProcCPU(p.Pid())
		red0, rerr = harness.ReadRedisInfo(ctx, b.rdb)
		merr = errors.Join(aerr, rerr)
	})
	agg, aerr := harness.ProcCPU(p.Pid())
	red1, rerr := harness.ReadRedisInfo(ctx, b.rdb)
	aerr = errors.Join(aerr, merr, rerr)
	// Memory is read after the stop: a write-back aggregator's last
	// checkpoint (at shutdown) holds subjects too. Commands and CPU are of
	// the window (read at its ends): the checkpoints of the events just
	// before it that land inside stand for those of its last events that
	// land after.
	serr := p.Stop(15 * time.Second)
	after, ierr := harness.ReadRedisInfo(ctx, b.rdb)
	if bin == b.cfg.Bin {
		name := "floodgate aggregator --no-history"
		if events != b.cfg.Events {
			// A longer topic holds more read ahead: its own row, so the
			// figure of the usual runs stays comparable.
			name += fmt.Sprintf(" (%s events)", harness.Human(float64(events)))
		}
		b.peak(name, p)
	}
	if err = errors.Join(err, ierr, serr); err != nil {
		return f, err
	}
	subs, err := harness.CountSubjects(ctx, b.rdb, prefix)
	if err != nil {
		return f, err
	}
	// Only the aggregator talks to this Redis during the run (plus our INFO
	// calls).
	// Redis commands and CPU per event over the steady window; bytes per
	// subject over the whole run.
	n := win.events()
	f.Rate = []float64{win.rate()}
	if aerr == nil {
		f.Cmds = []float64{float64(red1.TotalCalls("info")-red0.TotalCalls("info")) / n}
		f.CPU = []float64{(red1.CPU - red0.CPU) * 1e6 / n}
		f.Agg = []float64{float64((agg - agg0).Microseconds()) / n}
	}
	f.Subjects = []int{subs}
	if subs > 0 {
		f.Bytes = []float64{float64(after.UsedMemory-before.UsedMemory) / float64(subs)}
	}
	return f, stacktest.DeletePrefix(ctx, b.rdb, prefix)
}

// aggregatorArgs are the arguments of a live aggregator (no history) on t
// over topic, with the rules at rulesPath.
func (b *bench) aggregatorArgs(t target, topic, group, prefix, rulesPath, metricsAddr string) []string {
	args := []string{"aggregator", "--no-history", "--brokers", strings.Join(t.brokers, ","),
		"--topic", topic, "--dlq-topic", topic + ".dlq", "--decisions-topic", topic + ".decisions",
		"--live-group", group, "--key-prefix", prefix}
	args = append(args, t.redisArgs()...)
	return append(args, "--rules", rulesPath, "--metrics-addr", metricsAddr)
}

// waitCounted polls a counter on the metrics of one or more processes
// until their sum reaches want, and returns the rate between the first
// sample at which every process had counted something (a group whose
// members all joined and read) and the sample that reached want.
func waitCounted(ctx context.Context, procs []*childproc.Proc, urls []string, name string, want float64) (float64, error) {
	w, err := waitWindow(ctx, procs, urls, name, want, 0, nil)
	return w.rate(), err
}

// steadyFrom is where a steady window starts: a quarter of the events
// counted, past the group join, the cold loads of the first subjects and
// the runtime's warm-up, which counting from process start put inside the
// CPU per event (issue 55: 3.69 µs × 583k/s came to more cores than the
// machine has).
const steadyFrom = 0.25

// countWindow is a span of a counter: the counts and times at its ends.
type countWindow struct {
	n0, n1 float64
	t0, t1 time.Time
}

func (w countWindow) rate() float64   { return (w.n1 - w.n0) / w.t1.Sub(w.t0).Seconds() }
func (w countWindow) events() float64 { return w.n1 - w.n0 }

// waitWindow is waitCounted over the window from the first sample at
// which every process had counted something and the sum reached from×want
// to the sample that reached want; mark, when set, runs at the window's
// start (to read CPU and Redis counters there).
func waitWindow(ctx context.Context, procs []*childproc.Proc, urls []string, name string, want, from float64, mark func()) (countWindow, error) {
	deadline := time.Now().Add(10 * time.Minute)
	var w countWindow
	for time.Now().Before(deadline) {
		for _, p := range procs {
			if !p.Alive() {
				return w, fmt.Errorf("%s exited: %s", p.Name(), p.Tail(5))
			}
		}
		sum, all, err := scrapeSum(ctx, urls, name)
		now := time.Now()
		if err == nil {
			if all && w.t0.IsZero() && sum >= from*want && sum < want {
				w.t0, w.n0 = now, sum
				if mark != nil {
					mark()
				}
			}
			if sum >= want {
				if w.t0.IsZero() {
					return w, fmt.Errorf("%s: reached %v before every process had counted %v (a member joined late): raise --events", name, want, from*want)
				}
				w.t1, w.n1 = now, sum
				if now.Sub(w.t0) <= 0 || sum-w.n0 <= 0 {
					return w, fmt.Errorf("%s: reached %v in one poll: too few events to time", name, want)
				}
				return w, nil
			}
		}
		select {
		case <-ctx.Done():
			return w, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return w, fmt.Errorf("%s did not reach %v", name, want)
}

// scrapeSum sums a counter over metrics endpoints and tells whether every
// one of them had counted something.
func scrapeSum(ctx context.Context, urls []string, name string) (sum float64, all bool, err error) {
	all = true
	for _, u := range urls {
		s, err := promtext.Scrape(ctx, u)
		if err != nil {
			return 0, false, err
		}
		v := s.Sum(name)
		sum += v
		all = all && v > 0
	}
	return sum, all, nil
}

// history: the history group (consume.Group + history.Sink, exactly
// what `floodgate aggregator` wires) in this process, over the pre-filled
// topic; events/s from the first stored offset to the last. Once, after the
// first run, it runs again without and with dedup (HistoryDedup), each in a
// database of its own.
func (b *bench) history(ctx context.Context) error {
	if len(b.topics) == 0 {
		return errors.New("no pre-filled topic")
	}
	for i := 0; i < b.cfg.Runs; i++ {
		f, err := b.historyRun(ctx, fmt.Sprint(i), b.pool, 0)
		if err != nil {
			return err
		}
		b.res.History = append(b.res.History, f.Rate)
		b.res.HistoryRows = append(b.res.HistoryRows, f.Rows)
	}
	for _, v := range []struct {
		dedup time.Duration
		into  *historyFigures
	}{{0, &b.res.HistoryDedup.Without}, {historyDedup, &b.res.HistoryDedup.With}} {
		if err := b.historyPrivate(ctx, v.dedup, v.into); err != nil {
			return err
		}
	}
	return nil
}

// historyDedup is the horizon of the dedup run (dedupArgs).
const historyDedup = 10 * time.Minute

// HistoryDedup compares the history group without and with dedup, each in
// a fresh database (migrations.CreateDatabase), so that neither meets the
// other's rows or ids.
type HistoryDedup struct {
	Without, With historyFigures
}

// historyFigures are one history run.
type historyFigures struct {
	Rate    float64 // events/s
	Rows    float64 // bucket rows/s
	IDBytes float64 // history_ids bytes (heap + indexes) per event counted; dedup only
}

// historyPrivate runs the history group once in a database of its own.
func (b *bench) historyPrivate(ctx context.Context, dedup time.Duration, into *historyFigures) (err error) {
	name := fmt.Sprintf("fgbench_%s_hist_dedup_%v", b.id, dedup > 0)
	url, err := migrations.CreateDatabase(ctx, b.cfg.PostgresURL, name)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return errors.Join(fmt.Errorf("postgres %s: %w", name, err), migrations.DropDatabase(context.WithoutCancel(ctx), b.cfg.PostgresURL, name))
	}
	defer func() {
		pool.Close()
		err = errors.Join(err, migrations.DropDatabase(context.WithoutCancel(ctx), b.cfg.PostgresURL, name))
	}()
	f, err := b.historyRun(ctx, fmt.Sprintf("dedup-%v", dedup > 0), pool, dedup)
	if err != nil {
		return err
	}
	if dedup > 0 {
		var size int64
		if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size('floodgate.history_ids'::regclass)`).Scan(&size); err != nil {
			return fmt.Errorf("size of %s floodgate.history_ids: %w", name, err)
		}
		f.IDBytes = float64(size) / float64(b.cfg.Events)
	}
	*into = f
	return nil
}

// historyRun runs a fresh history group over the pre-filled topic into
// the database of pool, with dedup when positive.
func (b *bench) historyRun(ctx context.Context, run string, pool *pgxpool.Pool, dedup time.Duration) (historyFigures, error) {
	var f historyFigures
	group := fmt.Sprintf("bench-%s-hist-%s", b.id, run)
	reg := prometheus.NewRegistry()
	sink, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: group,
		Dedup: dedup, Registerer: reg, Logger: b.log})
	if err != nil {
		return f, err
	}
	g, err := consume.NewGroup(consume.Config{Brokers: b.cfg.Brokers, Topic: b.topics[0], GroupID: group, Logger: b.log}, sink)
	if err != nil {
		return f, err
	}
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(gctx) }()
	var t0 time.Time
	var v0 int64
	var werr error
	for deadline := time.Now().Add(10 * time.Minute); ; {
		var v int64
		err := pool.QueryRow(ctx, `SELECT coalesce(sum(next_offset),0) FROM floodgate.consumer_offsets WHERE consumer_group=$1 AND topic=$2`, group, b.topics[0]).Scan(&v)
		now := time.Now()
		if err == nil && v > 0 && t0.IsZero() {
			t0, v0 = now, v
		}
		if err == nil && v >= int64(b.cfg.Events) {
			if now.Sub(t0) > 0 && v > v0 {
				f.Rate = float64(v-v0) / now.Sub(t0).Seconds()
			} else {
				werr = errors.New("history: all events in one poll: too few to time")
			}
			break
		}
		if time.Now().After(deadline) {
			werr = errors.New("history group did not finish in 10 minutes")
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	rows := gatherCounter(reg, "floodgate_history_bucket_rows_written_total")
	cancel()
	<-done
	if werr != nil {
		return f, werr
	}
	f.Rows = rows * f.Rate / float64(b.cfg.Events)
	return f, nil
}

func gatherCounter(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var t float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			t += m.GetCounter().GetValue()
		}
	}
	return t
}

// Latency is one event-to-deny measurement: background load at Rate (a
// Fraction of the end-to-end maximum, Results.LatE2EMax), and probes timed from their Publish call
// to the limiter's 429.
type Latency struct {
	Fraction       float64
	Rate, Achieved float64 // events/s offered and acknowledged
	P50, P99, Max  time.Duration
	N, Missed      int // probes denied in time, probes never denied
	// Kafka's own latency for the same probes under the same load: from
	// the publish call to a plain consumer in the bench holding all three
	// of a probe's events.
	KafkaP50, KafkaP99, KafkaMax time.Duration
	KafkaN                       int
	// From the publish call to the deny's entry in the partition's change
	// stream (its id is Redis's clock): the aggregator's share, the rest
	// the limiter's (following the stream, answering the check).
	DecidedP50, DecidedP99 time.Duration
	DecidedN               int
}

// settle waits, up to Options.Settle, until the 1-minute load average is
// below the number of cores, and returns how long it waited. Starting the
// cluster and secure profiles leaves it high for a minute or so, and the
// first steps would measure that; a machine busy with other work may stay
// above it, and the summary then says the machine was loaded.
func (b *bench) settle(ctx context.Context) time.Duration {
	start := time.Now()
	cores := float64(runtime.NumCPU())
	for i := 0; ; i++ {
		l := firstLoad(harness.LoadAvg())
		if l < cores || time.Since(start) >= b.cfg.Settle {
			if i == 0 {
				return 0
			}
			waited := time.Since(start).Round(time.Second)
			b.log.Info("bench: done waiting for the load", "load1", l, "waited", waited)
			return waited
		}
		if i%6 == 0 {
			b.log.Info("bench: waiting for the load to settle", "load1", l, "cores", cores)
		}
		select {
		case <-ctx.Done():
			return time.Since(start).Round(time.Second)
		case <-time.After(5 * time.Second):
		}
	}
}
