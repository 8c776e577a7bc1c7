package attack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/stacktest/kafkatopics"
	"github.com/floodgate-dev/floodgate/producer"
)

// Config configures the suite. Defaults point at scripts/stack.
type Config struct {
	// Bin is the floodgate binary under test. Required.
	Bin string
	// Brokers, RedisAddr and PostgresURL locate the stack. Required.
	Brokers     []string
	RedisAddr   string
	PostgresURL string
	// WorkDir receives logs and rules files. Default a new temp dir.
	WorkDir string
	// Subjects is how many invented subjects the memory scenario sends.
	// Default 1,000,000.
	Subjects int
	// LimiterRSSBound is the limiter's documented peak RSS bound under the
	// memory scenario; a run over it fails. Default 512 MiB.
	LimiterRSSBound int64
	// Only runs the scenarios whose names contain one of these. Default all.
	Only []string
	// Out is the Markdown file whose "attack" block is rewritten. Empty: none.
	Out string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Validate reports the first missing field.
func (c *Config) Validate() error {
	switch {
	case c.Bin == "":
		return errors.New("attack config: no floodgate binary")
	case len(c.Brokers) == 0 || c.RedisAddr == "" || c.PostgresURL == "":
		return errors.New("attack config: brokers, redis address and postgres url are required")
	}
	return nil
}

func (c *Config) setDefaults() error {
	if c.Subjects == 0 {
		c.Subjects = 1_000_000
	}
	if c.LimiterRSSBound == 0 {
		c.LimiterRSSBound = 512 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.WorkDir == "" {
		d, err := os.MkdirTemp("", "floodgate-attack-")
		if err != nil {
			return err
		}
		c.WorkDir = d
	}
	return nil
}

// Row is one scenario's outcome.
type Row struct {
	Scenario string
	Tried    string // what the attacker did
	Held     string // what floodgate did, with the figures
	Pass     bool
}

// scenario is one attack; it returns its row, or an error when it could
// not be run at all (the stack, not floodgate, failed).
type scenario struct {
	name string
	run  func(ctx context.Context, e *env) (Row, error)
}

var scenarios = []scenario{
	{"invalid-subject", invalidSubject},
	{"degraded-redis", degradedRedis},
	{"compressed-record", compressedRecord},
	{"million-subjects", millionSubjects},
	{"peer-forgery", peerForgery},
	{"email-case", emailCase},
	{"rls-descriptors", rlsDescriptors},
	{"http-subjects", httpSubjects},
	{"rls-empty-value", rlsEmptyValue},
	{"fetch-of-bombs", fetchOfBombs},
}

// Run runs the scenarios, writes the table to cfg.Out and returns the rows.
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	var rows []Row
	for _, sc := range scenarios {
		if !selected(sc.name, cfg.Only) {
			continue
		}
		cfg.Logger.Info("attack: start", "scenario", sc.name)
		row, err := runOne(ctx, cfg, sc)
		if err != nil {
			row = Row{Scenario: sc.name, Held: "could not run: " + err.Error()}
		}
		row.Scenario = sc.name
		cfg.Logger.Info("attack: done", "scenario", sc.name, "pass", row.Pass, "held", row.Held)
		rows = append(rows, row)
	}
	if cfg.Out != "" {
		if err := WriteDoc(cfg.Out, rows); err != nil {
			return rows, err
		}
	}
	return rows, nil
}

func runOne(ctx context.Context, cfg Config, sc scenario) (Row, error) {
	e, err := newEnv(ctx, cfg, sc.name)
	if err != nil {
		return Row{}, err
	}
	defer e.close()
	return sc.run(ctx, e)
}

func selected(name string, only []string) bool {
	if len(only) == 0 {
		return true
	}
	for _, o := range only {
		if o != "" && strings.Contains(name, o) {
			return true
		}
	}
	return false
}

// env is one scenario's own topics, Redis prefix and processes.
type env struct {
	cfg    Config
	log    *slog.Logger
	id     string
	topic  string
	dlq    string
	dec    string
	prefix string
	kafka  *kafkatopics.Client
	rdb    *redis.Client
	procs  []*childproc.Proc
}

func newEnv(ctx context.Context, cfg Config, name string) (*env, error) {
	id := strconv.FormatUint(rand.Uint64()%(1<<40), 36)
	e := &env{
		cfg: cfg, log: cfg.Logger.With("scenario", name), id: id,
		topic: "floodgate.attack." + id + ".events", dlq: "floodgate.attack." + id + ".dlq", dec: "floodgate.attack." + id + ".decisions",
		prefix: "atk" + id, kafka: kafkatopics.New(cfg.Brokers),
		rdb: redis.NewClient(&redis.Options{Addr: cfg.RedisAddr}),
	}
	for _, t := range []string{e.topic, e.dlq, e.dec} {
		if err := e.kafka.CreateTopic(ctx, t, 1); err != nil {
			e.close()
			return nil, fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	return e, nil
}

func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range e.procs {
		if p.Alive() {
			if err := p.Stop(20 * time.Second); err != nil {
				e.log.Warn("attack: stop", "proc", p.Name(), "err", err)
			}
		}
	}
	if err := stacktest.DeletePrefix(ctx, e.rdb, e.prefix); err != nil {
		e.log.Warn("attack: cleanup redis", "err", err)
	}
	if err := e.kafka.DeleteTopics(ctx, e.topic, e.dlq, e.dec); err != nil {
		e.log.Warn("attack: cleanup topics", "err", err)
	}
	if err := e.rdb.Close(); err != nil {
		e.log.Warn("attack: close redis", "err", err)
	}
}

// lag is the live group's committed lag on the events topic: the end
// offsets minus what the group committed, over every partition.
func (e *env) lag(ctx context.Context) (int64, error) {
	end, err := e.kafka.EndOffsets(ctx, e.topic)
	if err != nil {
		return 0, err
	}
	parts := make([]int, 0, len(end))
	for p := range end {
		parts = append(parts, p)
	}
	cl := &kafka.Client{Addr: kafka.TCP(e.cfg.Brokers...), Timeout: 10 * time.Second}
	resp, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: "atk-" + e.id + "-live", Topics: map[string][]int{e.topic: parts}})
	if err != nil {
		return 0, fmt.Errorf("offset fetch: %w", err)
	}
	var lag int64
	for _, p := range resp.Topics[e.topic] {
		if p.Error != nil {
			return 0, fmt.Errorf("offset fetch partition %d: %w", p.Partition, p.Error)
		}
		lag += end[p.Partition] - max(p.CommittedOffset, 0)
	}
	return lag, nil
}

// writeRules writes a rules file for this scenario and returns its path.
func (e *env) writeRules(yaml string) (string, error) {
	path := filepath.Join(e.cfg.WorkDir, e.id+"-rules.yaml")
	return path, os.WriteFile(path, []byte(yaml), 0o644)
}

// aggregator is a running `floodgate aggregator`.
type aggregator struct {
	*childproc.Proc
	metrics string // URL of /metrics
}

func (e *env) startAggregator(ctx context.Context, rulesPath string, extra ...string) (*aggregator, error) {
	addr, err := childproc.FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"aggregator",
		"--brokers", strings.Join(e.cfg.Brokers, ","),
		"--topic", e.topic, "--dlq-topic", e.dlq, "--decisions-topic", e.dec,
		"--live-group", "atk-" + e.id + "-live", "--history-group", "atk-" + e.id + "-history", "--key-prefix", e.prefix,
		"--redis-addr", e.cfg.RedisAddr, "--postgres-url", e.cfg.PostgresURL,
		"--rules", rulesPath, "--metrics-addr", addr,
	}, extra...)
	p, err := childproc.Start(ctx, childproc.Config{Name: e.id + "-aggregator", Bin: e.cfg.Bin, Args: args, LogDir: e.cfg.WorkDir})
	if err != nil {
		return nil, err
	}
	e.procs = append(e.procs, p)
	a := &aggregator{Proc: p, metrics: "http://" + addr + "/metrics"}
	if err := waitUp(ctx, p, a.metrics, 30*time.Second); err != nil {
		return nil, fmt.Errorf("aggregator did not serve metrics: %w", err)
	}
	return a, nil
}

// limiter is a running `floodgate limiter`.
type limiter struct {
	*childproc.Proc
	http, rls, admin string // addresses
}

// adminSecret is the admin token's secret ("attack=<secret>" on the
// command line, the secret alone as the bearer).
const adminSecret = "attack-admin-secret-0123456789"

// startLimiter starts a limiter reading Redis at redisAddr (the stack's, or
// a proxy in front of it) and waits until it is ready.
func (e *env) startLimiter(ctx context.Context, rulesPath, redisAddr string, extra ...string) (*limiter, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := childproc.FreePort()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	args := append([]string{"limiter",
		"--http-addr", addrs[0], "--rls-addr", addrs[1], "--admin-addr", addrs[2], "--admin-token", "attack=" + adminSecret,
		"--brokers", strings.Join(e.cfg.Brokers, ","), "--topic", e.topic, "--decisions-topic", e.dec,
		"--key-prefix", e.prefix, "--rules", rulesPath, "--redis-addr", redisAddr,
	}, extra...)
	p, err := childproc.Start(ctx, childproc.Config{Name: e.id + "-limiter-" + strconv.Itoa(len(e.procs)), Bin: e.cfg.Bin, Args: args, LogDir: e.cfg.WorkDir})
	if err != nil {
		return nil, err
	}
	e.procs = append(e.procs, p)
	l := &limiter{Proc: p, http: addrs[0], rls: addrs[1], admin: addrs[2]}
	if err := waitUp(ctx, p, "http://"+l.http+"/readyz", 2*time.Minute); err != nil {
		return nil, fmt.Errorf("limiter not ready: %w", err)
	}
	return l, nil
}

// publisher returns a producer for this scenario's topic.
func (e *env) publisher() (*producer.Publisher, error) {
	return producer.New(producer.Config{Brokers: e.cfg.Brokers, Topic: e.topic, BatchSize: 5000, Compression: "lz4"})
}

// status sends one HTTP request to the limiter and returns its status.
func status(ctx context.Context, method, url string, header map[string]string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	return resp.StatusCode, nil
}

// waitUp waits until url answers 200, failing at once when the process
// exits first (a refused flag, say), with the end of its log.
func waitUp(ctx context.Context, p *childproc.Proc, url string, timeout time.Duration) error {
	err := waitFor(ctx, url, timeout, func() (bool, error) {
		if !p.Alive() {
			return false, errExited
		}
		c, err := status(ctx, http.MethodGet, url, nil)
		return c == http.StatusOK, err
	})
	if err != nil || !p.Alive() {
		return fmt.Errorf("%s: %w (log: %s)", p.Name(), errors.Join(err, p.Err()), p.Tail(5))
	}
	return nil
}

var errExited = errors.New("process exited")

// waitFor polls cond every 100 ms until it holds or timeout passes.
func waitFor(ctx context.Context, what string, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if errors.Is(err, errExited) {
			return err
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s (last error: %v)", what, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
