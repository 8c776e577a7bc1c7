package benchmark

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"floodgate/bench/harness"
	"floodgate/event"
	"floodgate/producer"
	"floodgate/window"
)

type kafkaMessage = kafka.Message

// latency: the live aggregator under background load at half its measured
// maximum; probes publish 3 events (limit 2/m) for a fresh subject and poll
// Redis (one Check round trip every 2 ms) until the deny record appears.
func (b *bench) latency(ctx context.Context) error {
	maxRate := harness.Median(b.res.Live)
	if maxRate == 0 {
		return errors.New("no live throughput measured")
	}
	// The live maximum is measured draining a backlog with no producer
	// beside it; on a small machine half of it, with the load generator
	// competing for the same cores, may not be sustainable. A backlog shows
	// as missed probes or seconds of latency: then halve the rate and
	// measure again, and report the rate that was actually held.
	rate := maxRate / 2
	for attempt := 0; ; attempt++ {
		l, err := b.latencyAt(ctx, rate, attempt)
		if err != nil {
			return err
		}
		b.res.Lat, b.res.LatHalvings = l, attempt
		if (l.Missed == 0 && l.P50 < 2*time.Second) || attempt == 3 {
			return nil
		}
		rate /= 2
	}
}

// latencyModerate measures at a fixed rate well below saturation: the
// latency of a deployment that is not running flat out.
func (b *bench) latencyModerate(ctx context.Context) error {
	l, err := b.latencyAt(ctx, b.cfg.ModerateRate, 9)
	b.res.LatModerate = l
	return err
}

// latencyAt measures at one rate; each attempt has its own topic, group and
// key prefix, so no backlog or deny record carries over.
func (b *bench) latencyAt(ctx context.Context, rate float64, attempt int) (Latency, error) {
	l := Latency{Rate: rate}
	t, err := b.topic(fmt.Sprintf("lat%d", attempt))
	if err != nil {
		return l, err
	}
	prefix := fmt.Sprintf("bench%s-%d", b.id, attempt)
	addr, err := harness.FreePort()
	if err != nil {
		return l, err
	}
	args := []string{"aggregator", "--no-history", "--brokers", strings.Join(b.cfg.Brokers, ","),
		"--topic", t, "--dlq-topic", t + ".dlq", "--decisions-topic", t + ".decisions",
		"--group", fmt.Sprintf("bench-%s-lat%d", b.id, attempt), "--key-prefix", prefix,
		"--redis-addr", b.cfg.RedisAddr, "--rules", b.rules, "--metrics-addr", addr}
	b.topics = append(b.topics, t+".dlq", t+".decisions")
	p, err := harness.Start(ctx, harness.ProcConfig{Name: "aggregator-latency", Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
	if err != nil {
		return l, err
	}
	defer func() {
		_ = p.Stop(15 * time.Second)
		b.peak("floodgate aggregator --no-history", p)
	}()
	if err := harness.WaitHTTP(ctx, "http://"+addr+"/metrics", 30*time.Second); err != nil {
		return l, err
	}
	rdb := b.rdb
	store, err := window.NewStore(rdb, window.StoreConfig{Prefix: prefix, Partitions: func() int { return b.cfg.PartCount }})
	if err != nil {
		return l, err
	}
	pub, err := producer.New(producer.Config{Brokers: b.cfg.Brokers, Topic: t})
	if err != nil {
		return l, err
	}
	defer pub.Close()
	probePub, err := producer.New(producer.Config{Brokers: b.cfg.Brokers, Topic: t})
	if err != nil {
		return l, err
	}
	defer probePub.Close()

	lctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var tally *harness.Tally
	wg.Add(1)
	loadStart := time.Now()
	go func() {
		defer wg.Done()
		tally = harness.RunLoad(lctx, pub, harness.LoadConfig{Rate: rate, Action: "bench_visit", Kind: "ip",
			SubjectPrefix: "10.9.", Subjects: b.cfg.Subjects, Workers: 8, Batch: 500})
	}()
	// Let the group join and the load settle.
	time.Sleep(8 * time.Second)
	var lats []time.Duration
	missed := 0
	// At most a minute of probing: past the sustainable rate every probe
	// waits for the backlog, and the figure is made by then.
	probeEnd := time.Now().Add(time.Minute)
	for i := 0; i < b.cfg.Probes && ctx.Err() == nil && time.Now().Before(probeEnd); i++ {
		sub := fmt.Sprintf("probe-%s-%d", b.id, i)
		now := time.Now()
		evs := make([]event.Event, 3)
		for j := range evs {
			evs[j] = event.Event{V: 1, ID: event.NewID(), Action: "bench_probe", Kind: "ip", Subject: sub, TS: now, N: 1}
		}
		start := time.Now()
		if err := probePub.Publish(ctx, evs...); err != nil {
			stopLoad()
			wg.Wait()
			return l, err
		}
		q := []window.Query{{Subject: window.Subject{Action: "bench_probe", Kind: "ip", Subject: sub}, Windows: []time.Duration{time.Minute}}}
		seen := false
		for time.Since(start) < 15*time.Second {
			st, err := store.Check(ctx, time.Now(), q)
			if err == nil && st[0].Deny != nil {
				lats = append(lats, time.Since(start))
				seen = true
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if !seen {
			missed++
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopLoad()
	wg.Wait()
	acked, _ := tally.Snapshot()
	l.Achieved = float64(acked) / time.Since(loadStart).Seconds()
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	l.N, l.Missed = len(lats), missed
	l.P50 = harness.Quantile(lats, 0.50)
	l.P99 = harness.Quantile(lats, 0.99)
	if len(lats) > 0 {
		l.Max = lats[len(lats)-1]
	}
	return l, nil
}

// limiter: the limiter's load generator, `floodbench limiter` (this
// binary, run as its own process so its peak RSS is its own).
func (b *bench) limiter(ctx context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("limiter bench: find floodbench: %w", err)
	}
	args := []string{"limiter", "--redis-addr", b.cfg.RedisAddr, "--key-prefix", "bench" + b.id,
		"--duration", b.cfg.LimiterD.String(), "--concurrency", "1,16,64", "--markdown"}
	b.res.LimiterCmd = "floodbench " + strings.Join(args, " ")
	p, err := harness.Run(ctx, harness.ProcConfig{Name: "limiter-bench", Bin: self, Args: args, LogDir: b.cfg.WorkDir})
	b.peak("floodbench limiter (limiter + its load generator)", p)
	if err != nil {
		return err
	}
	var table []string
	for _, line := range splitLog(p.LogPath) {
		if strings.HasPrefix(line, "|") {
			table = append(table, line)
		}
	}
	b.res.LimiterTable = strings.Join(table, "\n")
	return nil
}

// roller: history with 4 days of backfilled events, then `floodgate roller
// once`; and the one-year curve query, timed five times.
func (b *bench) roller(ctx context.Context) error {
	var errs []error
	if err := b.rollerOnce(ctx); err != nil {
		b.res.RollerErr = err.Error()
		errs = append(errs, err)
	}
	if err := b.curve(ctx); err != nil {
		b.res.CurveErr = err.Error()
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

var reRolled = regexp.MustCompile(`: (\d+) rows → (\d+) rows`)
var reRollTook = regexp.MustCompile(`took (\S+)`)

func (b *bench) rollerOnce(ctx context.Context) error {
	args := []string{"roller", "once", "--postgres-url", b.cfg.PostgresURL}
	b.res.RollerCmd = "floodgate " + strings.Join(args, " ")
	p, err := harness.Run(ctx, harness.ProcConfig{Name: "roller", Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
	b.peak("floodgate roller once", p)
	if err != nil {
		return err
	}
	for _, line := range splitLog(p.LogPath) {
		if m := reRolled.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			b.res.RollerRows += n
		}
		if m := reRollTook.FindStringSubmatch(line); m != nil {
			if d, err := time.ParseDuration(m[1]); err == nil {
				b.res.RollerTook = d
			}
		}
	}
	return nil
}

func (b *bench) curve(ctx context.Context) error {
	args := []string{"query", "curve", "--postgres-url", b.cfg.PostgresURL, "--action", "bench_visit", "--last", "52w", "--step", "1d"}
	b.res.CurveCmd = "floodgate " + strings.Join(args, " ")
	for i := 0; i < 5; i++ {
		start := time.Now()
		p, err := harness.Run(ctx, harness.ProcConfig{Name: "query-curve", Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
		took := time.Since(start)
		b.peak("floodgate query curve", p)
		if err != nil {
			return err
		}
		b.res.Curve = append(b.res.Curve, float64(took)/float64(time.Millisecond))
	}
	return nil
}

func splitLog(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Split(string(data), "\n")
}
