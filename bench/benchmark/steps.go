package benchmark

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/stacktest/pacedload"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/producer"
)

type kafkaMessage = kafka.Message

// latency: the live aggregator and a limiter under background load at 10,
// 50 and 80 % of the live maximum; each probe publishes 3 events of a
// fresh subject (limit 2/m) and polls the limiter's public check
// (GET /v1/check, every millisecond) until it answers 429: from the publish
// call to the deny a client sees.
func (b *bench) latency(ctx context.Context) error {
	maxRate := harness.Median(b.res.LiveNow.Rate)
	if b.cfg.LatMax > 0 {
		maxRate = b.cfg.LatMax
	}
	if maxRate == 0 {
		return errors.New("no live throughput measured (run the live step or give --latency-max)")
	}
	// The shares are of the end-to-end maximum: producer, broker,
	// aggregator and limiter on the same two cores, as in the latency runs.
	e2e := b.cfg.LatE2E
	if e2e <= 0 {
		var err error
		if e2e, err = b.endToEndMax(ctx, maxRate); err != nil {
			return err
		}
	}
	b.res.LatE2EMax = e2e
	maxRate = e2e
	for i, f := range b.cfg.LatFractions {
		l, err := b.latencyAt(ctx, maxRate*f, i)
		l.Fraction = f
		b.res.Lat = append(b.res.Lat, l)
		if err != nil {
			return err
		}
	}
	return nil
}

// endToEndMax runs the live services under a load offered at twice the
// consume-only maximum for ten seconds and returns what the aggregator
// consumed per second over the last six: the most the whole pipeline
// carries with the producer on the same machine.
func (b *bench) endToEndMax(ctx context.Context, consumeMax float64) (float64, error) {
	t, err := b.topic("e2emax")
	if err != nil {
		return 0, err
	}
	prefix := "bench" + b.id + "-e2e"
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := stacktest.DeletePrefix(cctx, b.rdb, prefix); err != nil {
			b.log.Warn("bench: delete end-to-end keys", "prefix", prefix, "err", err)
		}
	}()
	svc, err := b.liveServices(ctx, t, prefix, "e2emax")
	if err != nil {
		return 0, err
	}
	defer svc.stop()
	pub, err := producer.New(producer.Config{Brokers: b.cfg.Brokers, Topic: t})
	if err != nil {
		return 0, err
	}
	defer pub.Close()
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pacedload.Run(lctx, pub, pacedload.Config{Rate: 2 * consumeMax, Action: "bench_visit", Kind: "ip",
			SubjectPrefix: "10.8.", Subjects: b.cfg.Subjects, Workers: 8, Batch: 500, TotalOnly: true})
	}()
	defer func() { stop(); wg.Wait() }()
	metric := []string{svc.metrics}
	time.Sleep(4 * time.Second)
	v0, _, err := scrapeSum(ctx, metric, "floodgate_aggregator_messages_in_total")
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	time.Sleep(6 * time.Second)
	v1, _, err := scrapeSum(ctx, metric, "floodgate_aggregator_messages_in_total")
	if err != nil {
		return 0, err
	}
	if v1 <= v0 {
		return 0, errors.New("end-to-end maximum: the aggregator consumed nothing")
	}
	return (v1 - v0) / time.Since(t0).Seconds(), nil
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
	// Deferred first, so it runs after the services stopped.
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := stacktest.DeletePrefix(cctx, b.rdb, prefix); err != nil {
			b.log.Warn("bench: delete latency keys", "prefix", prefix, "err", err)
		}
	}()
	svc, err := b.liveServices(ctx, t, prefix, fmt.Sprintf("lat%d", attempt))
	if err != nil {
		return l, err
	}
	defer svc.stop()
	pub, err := producer.New(producer.Config{Brokers: b.cfg.Brokers, Topic: t})
	if err != nil {
		return l, err
	}
	defer pub.Close()
	probePub, err := producer.New(producer.Config{Brokers: b.cfg.Brokers, Topic: t, BatchTimeout: time.Millisecond})
	if err != nil {
		return l, err
	}
	defer probePub.Close()

	lctx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var tally *pacedload.Tally
	wg.Add(1)
	loadStart := time.Now()
	go func() {
		defer wg.Done()
		tally = pacedload.Run(lctx, pub, pacedload.Config{Rate: rate, Action: "bench_visit", Kind: "ip",
			SubjectPrefix: "10.9.", Subjects: b.cfg.Subjects, Workers: 8, Batch: 500, TotalOnly: true})
	}()
	// Kafka's own latency for the probes: a plain consumer of the topic.
	kafkaSeen := newProbeArrivals("ip:probe-" + b.id + "-")
	wg.Add(1)
	go func() {
		defer wg.Done()
		kafkaSeen.consume(lctx, b.log, b.cfg.Brokers, t, b.cfg.PartCount)
	}()
	// Let the group join and the load settle.
	time.Sleep(8 * time.Second)
	starts := map[string]time.Time{}
	client := &http.Client{Timeout: 2 * time.Second}
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
		starts[sub] = start
		if err := probePub.Publish(ctx, evs...); err != nil {
			stopLoad()
			wg.Wait()
			return l, err
		}
		u := svc.limiter + "/v1/check?action=bench_probe&ip=" + sub
		seen := false
		for time.Since(start) < 15*time.Second {
			if resp, err := client.Get(u); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					lats = append(lats, time.Since(start))
					seen = true
					break
				}
			}
			time.Sleep(time.Millisecond)
		}
		if !seen {
			missed++
		}
		time.Sleep(probeGap)
	}
	stopLoad()
	wg.Wait()
	acked, _ := tally.Snapshot()
	l.Achieved = float64(acked) / time.Since(loadStart).Seconds()
	var klats []time.Duration
	for sub, start := range starts {
		if at, ok := kafkaSeen.all(sub, 3); ok {
			klats = append(klats, at.Sub(start))
		}
	}
	sort.Slice(klats, func(i, j int) bool { return klats[i] < klats[j] })
	l.KafkaN = len(klats)
	if len(klats) > 0 {
		l.KafkaP50, l.KafkaP99, l.KafkaMax = harness.Quantile(klats, 0.50), harness.Quantile(klats, 0.99), klats[len(klats)-1]
	}
	var dlats []time.Duration
	keys := window.Keys{Prefix: prefix}
	for sub, start := range starts {
		if at, ok := decidedAt(ctx, b.rdb, keys, b.cfg.PartCount, sub, start); ok {
			dlats = append(dlats, at.Sub(start))
		}
	}
	sort.Slice(dlats, func(i, j int) bool { return dlats[i] < dlats[j] })
	l.DecidedN = len(dlats)
	l.DecidedP50, l.DecidedP99 = harness.Quantile(dlats, 0.50), harness.Quantile(dlats, 0.99)
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	l.N, l.Missed = len(lats), missed
	l.P50 = harness.Quantile(lats, 0.50)
	l.P99 = harness.Quantile(lats, 0.99)
	if len(lats) > 0 {
		l.Max = lats[len(lats)-1]
	}
	return l, nil
}

// probeGap spaces the probes: each has a subject of its own, so the gap
// only keeps them from overlapping, and 200 of them fit the minute.
const probeGap = 50 * time.Millisecond

// decidedAt finds when the deny of a probe subject was written: the id of
// the first change-stream entry of its partition, from the publish on,
// whose decisions name it.
func decidedAt(ctx context.Context, rdb *redis.Client, keys window.Keys, partitions int, subject string, from time.Time) (time.Time, bool) {
	sub := window.Subject{Action: "bench_probe", Kind: "ip", Subject: subject}
	field := strconv.Quote(window.Field(sub))
	start := strconv.FormatInt(from.UnixMilli(), 10)
	end := strconv.FormatInt(from.Add(15*time.Second).UnixMilli(), 10)
	// bounded: a busy partition writes many entries in 15 s
	msgs, err := rdb.XRangeN(ctx, keys.Log(window.Partition(sub, partitions)), start, end, 5000).Result()
	if err != nil {
		return time.Time{}, false
	}
	for _, m := range msgs {
		if d, ok := m.Values["d"].(string); ok && strings.Contains(d, `"f":`+field) {
			ms, _, _ := strings.Cut(m.ID, "-")
			n, err := strconv.ParseInt(ms, 10, 64)
			return time.UnixMilli(n), err == nil
		}
	}
	return time.Time{}, false
}

// liveServices are a live aggregator and a limiter over one topic and key
// prefix, as processes of the real binary.
type liveServices struct {
	agg, lim *childproc.Proc
	limiter  string // base URL
	metrics  string // the aggregator's /metrics URL
	stop     func()
}

func (b *bench) liveServices(ctx context.Context, topic, prefix, name string) (*liveServices, error) {
	aggAddr, err := childproc.FreePort()
	if err != nil {
		return nil, err
	}
	limAddr, err := childproc.FreePort()
	if err != nil {
		return nil, err
	}
	common := []string{"--brokers", strings.Join(b.cfg.Brokers, ","), "--topic", topic,
		"--key-prefix", prefix, "--redis-addr", b.cfg.RedisAddr, "--rules", b.rules}
	aggArgs := append([]string{"aggregator", "--no-history", "--dlq-topic", topic + ".dlq", "--decisions-topic", topic + ".decisions",
		"--live-group", "bench-" + b.id + "-" + name, "--metrics-addr", aggAddr}, common...)
	limArgs := append([]string{"limiter", "--http-addr", limAddr, "--rls-addr", "off", "--no-publish"}, common...)
	if err := b.outputTopics(ctx, topic); err != nil {
		return nil, err
	}
	svc := &liveServices{limiter: "http://" + limAddr, metrics: "http://" + aggAddr + "/metrics"}
	svc.agg, err = childproc.Start(ctx, childproc.Config{Name: "aggregator-" + name, Bin: b.cfg.Bin, Args: aggArgs, LogDir: b.cfg.WorkDir})
	if err != nil {
		return nil, err
	}
	svc.lim, err = childproc.Start(ctx, childproc.Config{Name: "limiter-" + name, Bin: b.cfg.Bin, Args: limArgs, LogDir: b.cfg.WorkDir})
	if err != nil {
		_ = svc.agg.Stop(15 * time.Second)
		return nil, err
	}
	svc.stop = func() {
		_ = svc.agg.Stop(15 * time.Second)
		_ = svc.lim.Stop(15 * time.Second)
		b.peak("floodgate aggregator --no-history", svc.agg)
		b.peak("floodgate limiter", svc.lim)
	}
	if err := childproc.WaitHTTP(ctx, "http://"+aggAddr+"/metrics", 30*time.Second); err != nil {
		svc.stop()
		return nil, err
	}
	if err := childproc.WaitHTTP(ctx, svc.limiter+"/readyz", 30*time.Second); err != nil {
		svc.stop()
		return nil, err
	}
	return svc, nil
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
	p, err := childproc.Run(ctx, childproc.Config{Name: "roller", Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
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
		p, err := childproc.Run(ctx, childproc.Config{Name: "query-curve", Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
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

// probeArrivals records when a plain consumer received each probe event:
// Kafka's own produce→consume latency under the same load.
type probeArrivals struct {
	prefix string
	mu     sync.Mutex
	n      map[string]int
	last   map[string]time.Time
}

func newProbeArrivals(keyPrefix string) *probeArrivals {
	return &probeArrivals{prefix: keyPrefix, n: map[string]int{}, last: map[string]time.Time{}}
}

// consume reads every partition of topic from its end until ctx ends, one
// plain partition reader each (no group: nothing to join).
func (p *probeArrivals) consume(ctx context.Context, log *slog.Logger, brokers []string, topic string, partitions int) {
	var wg sync.WaitGroup
	for part := range partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: part,
				MinBytes: 1, MaxBytes: 4 << 20, MaxWait: 50 * time.Millisecond})
			defer r.Close()
			if err := r.SetOffset(kafka.LastOffset); err != nil {
				log.Warn("bench: kafka latency reader", "partition", part, "err", err)
				return
			}
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					if ctx.Err() == nil {
						log.Warn("bench: kafka latency reader", "partition", part, "err", err)
					}
					return
				}
				if k := string(m.Key); strings.HasPrefix(k, p.prefix) {
					sub := strings.TrimPrefix(k, "ip:")
					p.mu.Lock()
					p.n[sub]++
					p.last[sub] = time.Now()
					p.mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
}

// all returns when the consumer held want events of sub.
func (p *probeArrivals) all(sub string, want int) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last[sub], p.n[sub] >= want
}
