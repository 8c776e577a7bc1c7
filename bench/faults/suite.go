package faults

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/stacktest/kafkatopics"
	"github.com/floodgate-dev/floodgate/internal/stacktest/pacedload"
	"github.com/floodgate-dev/floodgate/internal/stacktest/promtext"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/producer"
)

// Config configures the fault suite. Defaults point at scripts/stack.
type Config struct {
	// Bin is the floodgate binary under test. Required.
	Bin string
	// Repo is the repository root (for scripts/stack and docs). Required.
	Repo string
	// Brokers, RedisAddr and PostgresURL locate the stack. Required.
	Brokers     []string
	RedisAddr   string
	PostgresURL string
	// ClusterBrokers and ClusterRedisAddrs locate scripts/stack's --cluster
	// profile (three brokers, a Redis Cluster), where the scenarios named
	// "cluster-..." run, with two aggregator processes. When it does not
	// answer, those scenarios are skipped, unless Only names "cluster".
	ClusterBrokers    []string
	ClusterRedisAddrs []string
	// WorkDir receives logs and the rules file. Default a new temp dir.
	WorkDir string
	// Rate of the background load, events/s. Default 2000.
	Rate float64
	// Subjects per scenario. Default 300.
	Subjects int
	// Kills is how many times the aggregator is SIGKILLed. Default 3.
	Kills int
	// Only runs the scenarios whose names contain one of these. Default all
	// (the cluster ones when the cluster profile answers).
	Only []string
	// Out is the Markdown file whose fault table is rewritten. Empty: none.
	Out string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Validate reports the first missing field.
func (c *Config) Validate() error {
	switch {
	case c.Bin == "":
		return errors.New("faults config: no floodgate binary")
	case c.Repo == "":
		return errors.New("faults config: no repository root")
	case len(c.Brokers) == 0 || c.RedisAddr == "" || c.PostgresURL == "":
		return errors.New("faults config: brokers, redis address and postgres url are required")
	}
	return nil
}

func (c *Config) setDefaults() error {
	if c.Rate == 0 {
		c.Rate = 2000
	}
	if c.Subjects == 0 {
		c.Subjects = 300
	}
	if c.Kills == 0 {
		c.Kills = 3
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.WorkDir == "" {
		d, err := os.MkdirTemp("", "floodgate-chaos-")
		if err != nil {
			return err
		}
		c.WorkDir = d
	}
	return nil
}

// Row is one line of the fault table.
type Row struct {
	Scenario     string // its name, as --only matches it
	Fault        string
	Produced     int64 // acknowledged to the load generator
	InDoubt      int64 // Publish calls that failed: may or may not be in Kafka
	InTopic      int64 // valid events of the scenario actually in Kafka (the truth)
	Postgres     int64
	Redis        int64
	DeadLettered int64
	LostPG       int64
	DupPG        int64
	LostRedis    int64
	DupRedis     int64
	// Reported is what the system reported lost or failed (an ERROR log and
	// a metric), in the scenario's unit; empty when nothing was.
	Reported     string
	Recovery     time.Duration
	RecoveryNote string
	Note         string
	Pass         bool
}

// Suite holds the state shared by the scenarios.
type Suite struct {
	cfg   Config
	id    string
	topic string
	dlq   string
	dec   string
	live  string
	hist  string
	pref  string
	act   string // counted action, one rule with a 1d window
	deny  string // action of the deny probe, 3/m
	rules string // rules file path
	good  []byte

	// cluster: the --cluster profile (three brokers, a Redis Cluster, two
	// aggregator processes in each group); brokers and redisAddr are the
	// profile's (redisAddr: the aggregators' --redis-addr).
	cluster   bool
	brokers   []string
	redisAddr string

	kafka  *kafkatopics.Client
	rdb    redis.UniversalClient
	store  *window.Store
	pool   *pgxpool.Pool
	query  *history.Querier
	pub    *producer.Publisher
	aggs   []*childproc.Proc // the running aggregators
	agg    *childproc.Proc   // the last started (the only one outside the cluster profile)
	aggN   int
	mets   string // metrics URL of agg
	metsOf map[*childproc.Proc]string
	log    *slog.Logger
	sides  []*side // aggregators on topics of their own (loss.go)
}

// scenario is one row of the table: a fault injected into a suite.
type scenario struct {
	name string
	run  func(*Suite, context.Context) (Row, error)
}

// The single-node profile's scenarios, in order.
var singleScenarios = []scenario{
	{"baseline", (*Suite).baseline},
	{"sigkill", (*Suite).sigkill},
	{"malformed", (*Suite).malformed},
	{"bad-rules", (*Suite).badRules},
	{"postgres", (*Suite).postgresRestart},
	{"kafka", (*Suite).kafkaRestart},
	{"apply-error", (*Suite).applyError},
	{"crash-publish", (*Suite).crashBeforePublish},
	{"rebuild-beside", (*Suite).rebuildBeside},
	{"retention-gap", (*Suite).retentionGap},
	{"topic-recreated", (*Suite).topicRecreated},
	{"redis", (*Suite).redisRestart}, // last: its rebuild re-checks every earlier scenario
}

// The cluster profile's scenarios, in order.
var clusterScenarios = []scenario{
	{"cluster-baseline", (*Suite).baseline},
	{"cluster-sigkill", (*Suite).clusterSigkill},
	{"cluster-redis-failover", (*Suite).clusterRedisFailover},
	{"cluster-redis-kill", (*Suite).clusterRedisKill},
	{"cluster-redis-kill-behind", (*Suite).clusterRedisKillBehind},
	{"cluster-kafka-kill", (*Suite).clusterKafkaKill},
}

// ProfileRows are the rows of one profile's table and the suite that
// measured them.
type ProfileRows struct {
	Suite *Suite
	Rows  []Row
}

// Run runs every scenario wanted, the single-node profile's and then the
// cluster profile's, and returns the table rows.
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	var runs []ProfileRows
	var all []Row
	for _, profile := range []struct {
		cluster   bool
		scenarios []scenario
	}{{false, singleScenarios}, {true, clusterScenarios}} {
		if !cfg.wantsAny(profile.scenarios) || ctx.Err() != nil {
			continue
		}
		if profile.cluster {
			if err := harness.ClusterAnswers(ctx, cfg.ClusterBrokers, cfg.ClusterRedisAddrs); err != nil {
				if cfg.clusterRequired() {
					return all, fmt.Errorf("cluster scenarios asked for: %w (start it with scripts/stack up --cluster)", err)
				}
				cfg.Logger.Warn("chaos: the cluster profile does not answer; its scenarios are skipped (scripts/stack up --cluster)", "err", err)
				continue
			}
		}
		s, err := newSuite(ctx, cfg, profile.cluster)
		if err != nil {
			return all, err
		}
		rows := s.runAll(ctx, profile.scenarios)
		// Stopped before the next profile runs: two sets of aggregators
		// would share two cores.
		s.close()
		runs = append(runs, ProfileRows{Suite: s, Rows: rows})
		all = append(all, rows...)
	}
	if cfg.Out != "" && len(runs) > 0 {
		if err := WriteDoc(cfg.Out, runs...); err != nil {
			return all, err
		}
	}
	return all, nil
}

// runAll runs the wanted scenarios of list, one row each.
func (s *Suite) runAll(ctx context.Context, list []scenario) []Row {
	var rows []Row
	for _, sc := range list {
		if !s.cfg.wanted(sc.name) {
			continue
		}
		s.log.Info("chaos: scenario start", "scenario", sc.name, "load1", harness.Load1())
		row, err := sc.run(s, ctx)
		row.Scenario = sc.name
		if err != nil {
			// A scenario that could not finish proves nothing: it fails.
			row.Fault, row.Pass = sc.name, false
			row.Note = "ERROR: " + err.Error()
			s.log.Error("chaos: scenario failed", "scenario", sc.name, "err", err)
		}
		s.log.Info("chaos: scenario done", "scenario", sc.name, "row", fmt.Sprintf("%+v", row))
		fmt.Println(FormatRow(row))
		rows = append(rows, row)
		if ctx.Err() != nil {
			break
		}
	}
	return rows
}

func (c *Config) wanted(name string) bool {
	if len(c.Only) == 0 {
		return true
	}
	for _, o := range c.Only {
		if strings.Contains(name, o) {
			return true
		}
	}
	return false
}

func (c *Config) wantsAny(list []scenario) bool {
	for _, sc := range list {
		if c.wanted(sc.name) {
			return true
		}
	}
	return false
}

// clusterRequired: Only names the cluster scenarios, so a missing cluster
// is an error rather than a skip.
func (c *Config) clusterRequired() bool {
	for _, o := range c.Only {
		if strings.Contains(o, "cluster") {
			return true
		}
	}
	return false
}

// newSuite creates a profile's topics, key prefix and groups and starts
// its aggregators: one, or two on the cluster profile.
func newSuite(ctx context.Context, cfg Config, cluster bool) (*Suite, error) {
	id := strconv.FormatInt(time.Now().Unix()%1_000_000_000, 36)
	brokers, redisAddr, rules := cfg.Brokers, cfg.RedisAddr, "rules.yaml"
	if cluster {
		// Another id than the single-node suite's of the same second.
		id = "c" + id
		brokers, redisAddr, rules = cfg.ClusterBrokers, strings.Join(cfg.ClusterRedisAddrs, ","), "rules-cluster.yaml"
	}
	s := &Suite{
		cfg:       cfg,
		id:        id,
		cluster:   cluster,
		brokers:   brokers,
		redisAddr: redisAddr,
		topic:     "floodgate.chaos." + id,
		dlq:       "floodgate.chaos." + id + ".dlq",
		dec:       "floodgate.chaos." + id + ".decisions",
		live:      "chaos-" + id + "-live",
		hist:      "chaos-" + id + "-history",
		pref:      "chaos" + id,
		act:       "chaos_" + id,
		deny:      "chaos_deny_" + id,
		kafka:     kafkatopics.New(brokers),
		metsOf:    map[*childproc.Proc]string{},
		log:       cfg.Logger.With("profile", map[bool]string{false: "single", true: "cluster"}[cluster]),
	}
	s.good = []byte(fmt.Sprintf(`# chaos suite rules (generated)
rules:
  - name: chaos-count
    action: %s
    kinds: [ip]
    limits: [100000000/d]
    message: never denies; its 1d window lets Check sum a whole day
  - name: chaos-deny
    action: %s
    kinds: [ip]
    limits: [3/m]
    message: deny probe
`, s.act, s.deny))
	s.rules = filepath.Join(cfg.WorkDir, rules)
	if err := os.WriteFile(s.rules, s.good, 0o644); err != nil {
		return nil, err
	}
	// On the cluster the brokers' defaults make every topic replicated
	// three times with min.insync.replicas=2.
	for _, t := range []struct {
		name string
		n    int
	}{{s.topic, 12}, {s.dlq, 3}, {s.dec, 3}} {
		if err := s.kafka.CreateTopic(ctx, t.name, t.n); err != nil {
			return nil, err
		}
	}
	if cluster {
		s.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.ClusterRedisAddrs})
	} else {
		s.rdb = redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
	}
	var err error
	if s.store, err = window.NewStore(s.rdb, window.StoreConfig{Prefix: s.pref, Partitions: func() int { return 12 }}); err != nil {
		return nil, err
	}
	if s.pool, err = pgxpool.New(ctx, cfg.PostgresURL); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s.query = history.NewQuerier(s.pool)
	if s.pub, err = producer.New(producer.Config{Brokers: brokers, Topic: s.topic, MaxAttempts: 3, WriteTimeout: 5 * time.Second}); err != nil {
		return nil, err
	}
	members := 1
	if cluster {
		members = 2
	}
	for range members {
		if err := s.startAggregator(ctx); err != nil {
			return nil, err
		}
	}
	s.log.Info("chaos: suite ready", "topic", s.topic, "live_group", s.live, "history_group", s.hist,
		"key_prefix", s.pref, "action", s.act, "aggregators", members, "workdir", cfg.WorkDir)
	return s, nil
}

func (s *Suite) close() {
	for _, p := range s.aggs {
		_ = p.Stop(15 * time.Second)
	}
	s.aggs = nil
	for _, sd := range s.sides {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		sd.close(ctx)
		cancel()
	}
	if s.pub != nil {
		_ = s.pub.Close()
		s.pub = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Both layouts, every primary of a cluster: the keys with the hash tag
	// first ({chaos<id>:p3}:...) included.
	if err := stacktest.DeletePrefix(ctx, s.rdb, s.pref); err != nil {
		s.log.Warn("chaos: cleanup redis", "err", err)
	}
	if err := s.kafka.DeleteTopics(ctx, s.topic, s.dlq, s.dec); err != nil {
		s.log.Warn("chaos: cleanup topics", "err", err)
	}
	if s.pool != nil {
		if _, err := s.pool.Exec(ctx, `DELETE FROM floodgate.consumer_offsets WHERE consumer_group = $1`, s.hist); err != nil {
			s.log.Warn("chaos: cleanup offsets", "err", err)
		}
		s.pool.Close()
	}
	_ = s.rdb.Close()
}

// aggregatorArgs is the command line of the aggregators under test.
func (s *Suite) aggregatorArgs(metrics string) []string {
	return []string{"aggregator",
		"--brokers", strings.Join(s.brokers, ","),
		"--topic", s.topic, "--dlq-topic", s.dlq, "--decisions-topic", s.dec,
		"--live-group", s.live, "--history-group", s.hist, "--key-prefix", s.pref,
		"--redis-addr", s.redisAddr, "--postgres-url", s.cfg.PostgresURL,
		"--rules", s.rules, "--metrics-addr", metrics,
		// A killed member's partitions move after the session timeout.
		"--session-timeout", "6s",
	}
}

// startAggregator starts one more aggregator process and waits until it
// serves metrics.
func (s *Suite) startAggregator(ctx context.Context) error {
	addr, err := childproc.FreePort()
	if err != nil {
		return err
	}
	s.aggN++
	p, err := childproc.Start(ctx, childproc.Config{
		Name: s.id + "-aggregator-" + strconv.Itoa(s.aggN), Bin: s.cfg.Bin, Args: s.aggregatorArgs(addr), LogDir: s.cfg.WorkDir,
	})
	if err != nil {
		return err
	}
	s.agg = p
	s.aggs = append(s.aggs, p)
	s.mets = "http://" + addr + "/metrics"
	s.metsOf[p] = s.mets
	if err := childproc.WaitHTTP(ctx, s.mets, 30*time.Second); err != nil {
		return fmt.Errorf("aggregator did not serve metrics: %w (log: %s)", err, p.Tail(5))
	}
	return nil
}

// killAggregator SIGKILLs aggregator p and forgets it.
func (s *Suite) killAggregator(p *childproc.Proc) {
	p.Kill()
	s.forget(p)
}

// stopAggregator stops aggregator p (SIGTERM) and forgets it.
func (s *Suite) stopAggregator(p *childproc.Proc) error {
	err := p.Stop(20 * time.Second)
	s.forget(p)
	return err
}

func (s *Suite) forget(p *childproc.Proc) {
	for i, q := range s.aggs {
		if q == p {
			s.aggs = append(s.aggs[:i], s.aggs[i+1:]...)
			break
		}
	}
	delete(s.metsOf, p)
}

// redisFailed makes a cluster client reload its slot map: after a primary
// died it keeps asking it (no MOVED comes from a refused connection) until
// its periodic reload, a minute later.
func (s *Suite) redisFailed(ctx context.Context) {
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		cc.ReloadState(ctx)
	}
}

// aggregatorSum sums a metric over the running aggregators.
func (s *Suite) aggregatorSum(ctx context.Context, name string) float64 {
	var sum float64
	for _, url := range s.metsOf {
		if m, err := promtext.Scrape(ctx, url); err == nil {
			sum += m.Sum(name)
		}
	}
	return sum
}

// stack runs scripts/stack with args.
func (s *Suite) stack(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(s.cfg.Repo, "scripts/stack"), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("scripts/stack %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	s.log.Info("chaos: scripts/stack "+strings.Join(args, " "), "out", strings.TrimSpace(string(out)))
	return nil
}

// lag returns the live and history lags: topic end minus the sinks' stored
// next offsets (partitions without one count from the topic start).
func (s *Suite) lag(ctx context.Context) (live, hist int64, err error) {
	end, err := s.kafka.EndOffsets(ctx, s.topic)
	if err != nil {
		return 0, 0, err
	}
	var lsum, hsum int64
	for p := range end {
		n, ok, err := s.store.Resume(ctx, s.live, s.topic, p)
		if err != nil {
			s.redisFailed(ctx)
			return 0, 0, err
		}
		if ok {
			lsum += n
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT coalesce(sum(next_offset), 0) FROM floodgate.consumer_offsets WHERE consumer_group = $1 AND topic = $2`, s.hist, s.topic)
	if err != nil {
		return 0, 0, fmt.Errorf("history offsets: %w", err)
	}
	for rows.Next() {
		if err := rows.Scan(&hsum); err != nil {
			rows.Close()
			return 0, 0, err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	e := kafkatopics.Total(end)
	return e - lsum, e - hsum, nil
}

// waitCaughtUp polls the lags until both are at most maxLag, returning the
// time it took. Errors while a service is down are retried.
func (s *Suite) waitCaughtUp(ctx context.Context, maxLag int64, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	var last error
	var ll, hl int64
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, h, err := s.lag(cctx)
		cancel()
		if err == nil && l <= maxLag && h <= maxLag {
			return time.Since(start), nil
		}
		last, ll, hl = err, l, h
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return time.Since(start), fmt.Errorf("not caught up after %s: live lag %d, history lag %d, last error %v", timeout, ll, hl, last)
}

// offsets returns the sinks' stored next offsets per partition.
func (s *Suite) sinkOffsets(ctx context.Context, parts map[int]int64) (live, hist map[int]int64, err error) {
	live = map[int]int64{}
	for p := range parts {
		n, _, err := s.store.Resume(ctx, s.live, s.topic, p)
		if err != nil {
			s.redisFailed(ctx)
			return nil, nil, err
		}
		live[p] = n
	}
	hist, err = historyOffsets(ctx, s.pool, s.hist, s.topic)
	return live, hist, err
}

// historyOffsets returns the next offsets the history sink's group stored
// per partition of topic.
func historyOffsets(ctx context.Context, pool *pgxpool.Pool, group, topic string) (map[int]int64, error) {
	rows, err := pool.Query(ctx, `SELECT "partition", next_offset FROM floodgate.consumer_offsets WHERE consumer_group = $1 AND topic = $2`, group, topic)
	if err != nil {
		return nil, fmt.Errorf("history offsets: %w", err)
	}
	defer rows.Close()
	hist := map[int]int64{}
	for rows.Next() {
		var p int
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			return nil, err
		}
		hist[p] = n
	}
	return hist, rows.Err()
}

// waitPast waits until both sinks stored, for every partition, a next
// offset at or past the topic's end offsets taken when it is called: all
// that was in Kafka at that moment is applied.
func (s *Suite) waitPast(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var target map[int]int64
	var last error
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if target == nil {
			target, last = s.kafka.EndOffsets(cctx, s.topic)
		}
		if target != nil {
			var live, hist map[int]int64
			live, hist, last = s.sinkOffsets(cctx, target)
			if last == nil {
				done := true
				for p, e := range target {
					if live[p] < e || hist[p] < e {
						done = false
						break
					}
				}
				if done {
					cancel()
					return nil
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("sinks not past the topic end after %s (last error %v)", timeout, last)
}

// load starts background load of the scenario's subjects; stop() ends it
// and returns the tally.
func (s *Suite) load(ctx context.Context, scenario string) (stop func() *pacedload.Tally) {
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan *pacedload.Tally, 1)
	go func() {
		done <- pacedload.Run(lctx, s.pub, pacedload.Config{
			Rate: s.cfg.Rate, Action: s.act, Kind: "ip", SubjectPrefix: scenario + "-", Subjects: s.cfg.Subjects,
		})
	}()
	return func() *pacedload.Tally { cancel(); return <-done }
}

// mark is the topic state at a scenario's start.
type mark struct {
	start    map[int]int64
	dlqStart int64
	at       time.Time
}

func (s *Suite) mark(ctx context.Context) (mark, error) {
	st, err := s.kafka.EndOffsets(ctx, s.topic)
	if err != nil {
		return mark{}, err
	}
	d, err := s.kafka.EndOffsets(ctx, s.dlq)
	if err != nil {
		return mark{}, err
	}
	return mark{start: st, dlqStart: kafkatopics.Total(d), at: time.Now()}, nil
}

// count fills the counting columns of row for the scenario's subjects:
// the truth is what the topic holds between m and now.
func (s *Suite) count(ctx context.Context, scenario string, m mark, t *pacedload.Tally, row *Row) error {
	if _, err := s.waitCaughtUp(ctx, 0, 180*time.Second); err != nil {
		return fmt.Errorf("drain after %s: %w", scenario, err)
	}
	end, err := s.kafka.EndOffsets(ctx, s.topic)
	if err != nil {
		return err
	}
	truth := map[string]int64{}
	prefix := scenario + "-"
	err = s.kafka.ReadRange(ctx, s.topic, m.start, end, func(msg kafkaMessage) {
		ev, err := event.Decode(msg.Value)
		// What the aggregator dead-letters is not truth: malformed, key
		// mismatch, or further than 5 s ahead of the time it was written.
		if err != nil || event.CheckKey(msg.Key, ev) != nil || ev.Action != s.act || !strings.HasPrefix(ev.Subject, prefix) ||
			ev.TS.After(msg.Time.Add(5*time.Second)) {
			return
		}
		truth[ev.Subject] += ev.N
	})
	if err != nil {
		return err
	}
	d, err := s.kafka.EndOffsets(ctx, s.dlq)
	if err != nil {
		return err
	}
	row.DeadLettered = kafkatopics.Total(d) - m.dlqStart
	if t != nil {
		row.Produced, row.InDoubt = t.Snapshot()
	}
	for _, v := range truth {
		row.InTopic += v
	}
	pg, err := s.pgCounts(ctx, prefix)
	if err != nil {
		return err
	}
	rc, err := s.redisCounts(ctx, s.store, prefix, truth)
	if err != nil {
		return err
	}
	row.Postgres, row.LostPG, row.DupPG = compare(truth, pg)
	row.Redis, row.LostRedis, row.DupRedis = compare(truth, rc)
	return nil
}

// compare returns the total counted and the per-subject shortfall and excess.
func compare(truth, got map[string]int64) (total, lost, dup int64) {
	for sub, want := range truth {
		g := got[sub]
		if g < want {
			lost += want - g
		} else {
			dup += g - want
		}
	}
	for sub, g := range got {
		total += g
		if _, ok := truth[sub]; !ok {
			dup += g
		}
	}
	return total, lost, dup
}

func (s *Suite) pgCounts(ctx context.Context, prefix string) (map[string]int64, error) {
	top, err := s.query.Top(ctx, s.act, "ip", time.Time{}, time.Time{}, 1_000_000)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, r := range top {
		if strings.HasPrefix(r.Subject, prefix) {
			out[r.Subject] += r.Value
		}
	}
	return out, nil
}

// redisCounts sums each subject's 1d window with the Store's Check. The
// subjects asked are those of the truth plus every subject name the load
// could have used.
func (s *Suite) redisCounts(ctx context.Context, store *window.Store, prefix string, truth map[string]int64) (map[string]int64, error) {
	subs := map[string]bool{}
	for sub := range truth {
		subs[sub] = true
	}
	for i := 0; i < s.cfg.Subjects; i++ {
		subs[prefix+strconv.Itoa(i)] = true
	}
	names := make([]string, 0, len(subs))
	for sub := range subs {
		names = append(names, sub)
	}
	sort.Strings(names)
	out := map[string]int64{}
	now := time.Now()
	for i := 0; i < len(names); i += 200 {
		chunk := names[i:min(i+200, len(names))]
		qs := make([]window.Query, len(chunk))
		for j, n := range chunk {
			qs[j] = window.Query{Subject: window.Subject{Action: s.act, Kind: "ip", Subject: n}, Windows: []time.Duration{24 * time.Hour}}
		}
		st, err := store.Check(ctx, now, qs)
		if err != nil {
			return nil, err
		}
		for j, n := range chunk {
			if v := st[j].Sums[0]; v != 0 {
				out[n] = v
			}
		}
	}
	return out, nil
}

// verdict sets Pass: no loss or excess in Postgres, none in Redis unless
// the scenario loses Redis by design.
func verdict(row *Row, redisMayLose bool) {
	row.Pass = row.LostPG == 0 && row.DupPG == 0 && row.InTopic > 0
	if !redisMayLose {
		row.Pass = row.Pass && row.LostRedis == 0 && row.DupRedis == 0
	}
}

var _ = rules.MaxWindow
