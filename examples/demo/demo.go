package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/migrations"
	"github.com/floodgate-dev/floodgate/producer"
)

// Config says where the stack and the binaries are and how big the
// scenario is.
type Config struct {
	Floodgate, Shortener, Chromium string
	Brokers                        []string
	RedisAddr, PostgresURL         string
	Rules, Decisions               string
	Duration                       time.Duration
	VisitRate                      int
	Screenshot                     string // also write the dashboard's screenshot here
	Stay                           bool   // keep the services after the report until ctx ends
	Out                            io.Writer
}

func (c *Config) validate() error {
	switch {
	case c.Floodgate == "" || c.Shortener == "":
		return errors.New("the floodgate and shortener binaries are required")
	case len(c.Brokers) == 0 || c.RedisAddr == "" || c.PostgresURL == "":
		return errors.New("brokers, redis and postgres addresses are required")
	case c.Duration <= 0 || c.VisitRate <= 0:
		return errors.New("duration and visit rate must be positive")
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	return nil
}

// Run performs the whole demo: services up, links, traffic, report,
// dashboard check, services down.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	out := cfg.Out
	run := strconv.FormatInt(time.Now().Unix(), 36)
	topic := "floodgate.demo." + run
	logDir, err := os.MkdirTemp("", "floodgate-demo-")
	if err != nil {
		return fmt.Errorf("log dir: %w", err)
	}

	say(out, "setting up: topic %s, migrations", topic)
	if _, err := topics.Ensure(ctx, cfg.Brokers, topics.Defaults(topic, "floodgate.events.dlq", cfg.Decisions)...); err != nil {
		return fmt.Errorf("topics: %w", err)
	}
	defer func() {
		if derr := topics.Delete(context.WithoutCancel(ctx), cfg.Brokers, topic); derr != nil {
			fmt.Fprintf(out, "could not delete %s: %v\n", topic, derr)
		}
	}()
	if err := migrate(ctx, cfg.PostgresURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, cfg.PostgresURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	q := history.NewQuerier(pool)
	before, err := totals(ctx, q)
	if err != nil {
		return err
	}

	svc, err := startServices(ctx, cfg, topic, "fgdemo-"+run, logDir)
	if err != nil {
		return err
	}
	defer svc.stop(out)
	say(out, "dashboard: %s", svc.dashboard)

	pub, err := producer.New(producer.Config{Brokers: cfg.Brokers, Topic: topic})
	if err != nil {
		return err
	}
	dec := watchDecisions(ctx, cfg.Brokers, cfg.Decisions)
	defer dec.close()

	sc := newScenario(cfg, svc.shortener, pub)
	if err := sc.createLinks(ctx, out); err != nil {
		return err
	}
	if err := traffic(ctx, cfg, svc, sc, dec); err != nil {
		return err
	}
	if err := pub.Close(); err != nil {
		return fmt.Errorf("producer: %w", err)
	}

	say(out, "traffic done; waiting for the aggregator to count every event")
	produced := sc.producedByAction()
	counted, err := waitCounted(ctx, q, before, produced, 2*time.Minute)
	// The distinct rule's deny of the internal host (issue 13): its
	// decision may trail the counts by a batch.
	stuffed := dec.waitRule(ctx, "credential-stuffing 20/1h", "ip:"+stufferIP, 30*time.Second)
	report(out, produced, counted, sc, dec)
	if err != nil {
		return err
	}
	if !stuffed {
		return fmt.Errorf("no credential-stuffing deny of ip:%s on %s: is rule credential-stuffing (distinct: email, 20/h) in %s?", stufferIP, cfg.Decisions, cfg.Rules)
	}
	if err := reportLive(ctx, out, cfg, topic, "fgdemo-"+run, sc); err != nil {
		return err
	}
	if err := checkDashboard(ctx, out, cfg, svc.dashboard, q, logDir); err != nil {
		return err
	}
	fmt.Fprintf(out, `
Look further (history stays in PostgreSQL):
  the dashboard: %s  (go run ./cmd/floodgate dashboard, after the demo)
  go run ./cmd/floodgate query top --action visit --kind link --last 1h
  go run ./cmd/floodgate query curve --action visit --kind link --last 30m
Service logs of this run: %s
`, svc.dashboard, logDir)
	if cfg.Stay {
		say(out, "the services and the dashboard (%s) keep running; Ctrl-C stops them", svc.dashboard)
		<-ctx.Done()
	}
	return nil
}

func say(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "==> "+format+"\n", args...)
}

func migrate(ctx context.Context, url string) error {
	db, err := migrations.Open(ctx, url)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = migrations.Up(ctx, db)
	return err
}

// services are the processes the demo runs.
type services struct {
	procs             []*childproc.Proc
	aggregatorMetrics string
	limiter           string // http://host:port
	shortener         string
	dashboard         string
}

func startServices(ctx context.Context, cfg Config, topic, prefix, logDir string) (*services, error) {
	addrs := make([]string, 5)
	for i := range addrs {
		a, err := childproc.FreePort()
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		addrs[i] = a
	}
	s := &services{aggregatorMetrics: addrs[0], limiter: "http://" + addrs[1], shortener: "http://" + addrs[3], dashboard: "http://" + addrs[4] + "/"}
	env := []string{
		"FLOODGATE_BROKERS=" + strings.Join(cfg.Brokers, ","),
		"FLOODGATE_REDIS_ADDR=" + cfg.RedisAddr,
		"FLOODGATE_POSTGRES_URL=" + cfg.PostgresURL,
		"FLOODGATE_RULES=" + cfg.Rules,
		"FLOODGATE_TOPIC=" + topic,
		"FLOODGATE_DECISIONS_TOPIC=" + cfg.Decisions,
		"FLOODGATE_KEY_PREFIX=" + prefix,
	}
	specs := []childproc.Config{
		// Unique visitors per link (the visit's ip attr) in history, for
		// the dashboard.
		{Name: "aggregator", Bin: cfg.Floodgate, Args: []string{"aggregator", "--metrics-addr", addrs[0], "--visitors", "visit=ip"}},
		{Name: "limiter", Bin: cfg.Floodgate, Args: []string{"limiter", "serve", "--http-addr", addrs[1], "--rls-addr", addrs[2]}},
		{Name: "roller", Bin: cfg.Floodgate, Args: []string{"roller", "run", "--every", "15s"}},
		{Name: "dashboard", Bin: cfg.Floodgate, Args: []string{"dashboard", "--addr", addrs[4], "--refresh", "2s", "--recent", "12"}},
		// The demo plays the proxy in front of the shortener: its visitors
		// are named by X-Forwarded-For.
		{Name: "shortener", Bin: cfg.Shortener, Args: []string{"--addr", addrs[3], "--limiter-url", s.limiter, "--trusted-proxies", "127.0.0.1/32"}},
	}
	for _, p := range specs {
		p.Env, p.LogDir = env, logDir
		proc, err := childproc.Start(ctx, p)
		if err != nil {
			s.stop(io.Discard)
			return nil, err
		}
		s.procs = append(s.procs, proc)
		say(cfg.Out, "started %-10s pid %-7d log %s", p.Name, proc.Pid(), proc.LogPath)
	}
	for _, u := range []string{"http://" + s.aggregatorMetrics + "/healthz", s.limiter + "/readyz", s.dashboard + "healthz", s.shortener + "/readyz"} {
		if err := childproc.WaitHTTP(ctx, u, time.Minute); err != nil {
			s.stop(io.Discard)
			return nil, fmt.Errorf("%s not ready: %w", u, err)
		}
	}
	return s, nil
}

// stop ends the services gracefully (SIGTERM: each finishes its in-flight
// work) in reverse order and says how each ended.
func (s *services) stop(out io.Writer) {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		status := "stopped cleanly"
		if err := p.Stop(20 * time.Second); err != nil {
			status = "stopped: " + err.Error()
		}
		say(out, "%s %s (peak RSS %d MiB)", p.Name(), status, p.PeakRSS()>>20)
	}
	s.procs = nil
}
