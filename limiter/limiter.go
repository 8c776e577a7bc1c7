// Package limiter is the limiter process, what `floodgate limiter serve`
// starts: lookups over Connect/gRPC and HTTP, Envoy's rate limit service,
// and the admin endpoints, answered from the decisions the aggregators
// publish (the deciding itself is internal/decide). It is public so that a
// program can run a limiter in its own process as the CLI does, its
// configuration being the CLI's flags. The packages a service embeds to
// ask a limiter are beside it: limiterclient (Go client), limitermw (HTTP
// middleware) and limitapi (the API's types).
//
//	l, err := decide.New(cfg, logger) // cfg: the flags' values
//	if err != nil { ... }
//	err = l.Run(ctx) // until ctx ends, then drains
package limiter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/feed"
	"github.com/floodgate-dev/floodgate/internal/flagparse"
	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
	"github.com/floodgate-dev/floodgate/internal/metrics"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/redisconn"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/rules/reload"
	"github.com/floodgate-dev/floodgate/internal/secretfile"
	"github.com/floodgate-dev/floodgate/internal/strict"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/producer"
)

// The connection settings a limiter shares with the other processes; the
// names are the flags' groups.
type (
	RedisFlags     = redisconn.Flags
	KafkaFlags     = topics.Flags
	ListenTLSFlags = tlsfiles.ListenFlags
)

// Limiter is a limiter process.
type Limiter struct {
	cfg Config
	log *slog.Logger
}

// ParseFlags returns the Config that args give, as `floodgate limiter
// serve` reads them: each flag's FLOODGATE_* variable and default where
// args do not set it.
func ParseFlags(args []string) (Config, error) {
	var cfg Config
	err := flagparse.Parse("limiter", &cfg, args)
	return cfg, err
}

// Validate reports the first setting that cannot run, before anything is
// connected.
func (c *Config) Validate() error {
	if c.StateMaxSubjects < 0 {
		return fmt.Errorf("--state-max-subjects %d is negative", c.StateMaxSubjects)
	}
	if _, err := decide.ParseFailureMode(c.FailureMode); err != nil {
		return err
	}
	if _, err := decide.ParseRLSMode(c.RLSMode); err != nil {
		return err
	}
	if c.MaxBytes <= 0 || c.TakeBatch <= 0 {
		return fmt.Errorf("--max-request-bytes %d, --take-batch %d: want both above 0", c.MaxBytes, c.TakeBatch)
	}
	return nil
}

// New returns the limiter cfg configures (an error when it does not
// validate); Run starts it.
func New(cfg Config, logger *slog.Logger) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Limiter{cfg: cfg, log: logger}, nil
}

// Run connects, serves until ctx ends, then drains the requests in flight.
func (l *Limiter) Run(ctx context.Context) error { return l.cfg.run(ctx, l.log) }

func closeLogged(logger *slog.Logger, what string, c io.Closer) {
	if err := c.Close(); err != nil {
		logger.Warn("close "+what, "err", err)
	}
}

// LimiterFlags are the decision settings of the limiter.
type LimiterFlags struct {
	RedisFlags
	KeyPrefix    string        `name:"key-prefix" env:"FLOODGATE_KEY_PREFIX" default:"fg" help:"Prefix of every Redis key (as the aggregator's)."`
	RedisTimeout time.Duration `name:"redis-timeout" aliases:"timeout" env:"FLOODGATE_REDIS_TIMEOUT,FLOODGATE_TIMEOUT" default:"50ms" help:"Redis budget of one exact check or take; past it the failure mode answers."`
	FailureMode  string        `name:"failure-mode" env:"FLOODGATE_FAILURE_MODE" default:"open" enum:"open,closed" help:"Answer when Redis fails or is slow: open (allow) or closed (deny)."`
	TakeBatch    int           `name:"take-batch" env:"FLOODGATE_TAKE_BATCH" default:"64" help:"Most concurrent strict takes of one Redis slot run in one script."`
}

// Config is the limiter's configuration: the flags of `floodgate limiter
// serve`, defaults in their tags (docs/cli.md).
type Config struct {
	RLSFlags
	LimiterFlags
	KafkaFlags
	AdminFlags
	ListenTLSFlags

	Rules         string `name:"rules" env:"FLOODGATE_RULES" default:"examples/rules.yaml" help:"Rules file (YAML); reloaded on SIGHUP and on change."`
	HTTPAddr      string `name:"http-addr" env:"FLOODGATE_HTTP_ADDR" default:"127.0.0.1:8080" help:"Connect/gRPC (h2c), /v1/check, /v1/take, /healthz, /readyz, /metrics."`
	RLSAddr       string `name:"rls-addr" env:"FLOODGATE_RLS_ADDR" default:"127.0.0.1:8081" help:"Envoy RateLimitService (gRPC); \"off\" disables."`
	RLSMode       string `name:"rls-mode" env:"FLOODGATE_RLS_MODE" default:"check" enum:"check,take" help:"Envoy calls only check (the app publishes events) or take (check and count)."`
	AuthToken     string `name:"auth-token" env:"FLOODGATE_AUTH_TOKEN" help:"Bearer token required on RPC and /v1/* (empty: no auth). Prefer --auth-token-file."`
	AuthTokenFile string `name:"auth-token-file" env:"FLOODGATE_AUTH_TOKEN_FILE" help:"File holding the bearer token (wins over --auth-token)."`
	MaxBytes      int64  `name:"max-request-bytes" env:"FLOODGATE_MAX_REQUEST_BYTES" default:"65536" help:"Largest request body or RPC message."`
	MaxStreams    uint32 `name:"max-concurrent-streams" env:"FLOODGATE_MAX_CONCURRENT_STREAMS" default:"250" help:"Most calls in flight on one HTTP/2 connection (RLS and Connect/gRPC); past it a client waits or opens another connection."`
	// Each held subject costs about 0.3 KiB (docs/limiter.md, "Memory"):
	// the default keeps the state near 60 MiB however many subjects an
	// attacker brings.
	StateMaxSubjects int  `name:"state-max-subjects" env:"FLOODGATE_STATE_MAX_SUBJECTS" default:"200000" help:"Most subjects held in memory; past it, checks of subjects not held read Redis (exact) until the states left out expire. 0: no bound."`
	NoPublish        bool `name:"no-publish" env:"FLOODGATE_NO_PUBLISH" help:"Take does not publish events to Kafka (no history; only strict subjects are counted)."`
	// The metrics name the rules; a scraper can send the token.
	MetricsAuth bool `name:"metrics-auth" env:"FLOODGATE_METRICS_AUTH" help:"Require --auth-token on /metrics too (default: /metrics is open)."`
	// A take's answer never waits for Kafka (the publisher is
	// asynchronous), so a longer linger costs only delivery delay, and it
	// is what keeps the broker cheap: a partition's batch is one produce
	// request, and at 5 ms each of 12 partitions sends ~200 of them a second
	// under load (the broker then used more CPU than Redis and the limiter
	// together; docs/profiles.md, "A strict take").
	PublishLinger time.Duration `name:"publish-linger" env:"FLOODGATE_PUBLISH_LINGER" default:"50ms" help:"How long a take's events may wait to share a Kafka produce request with others (delivery delay, not answer latency)."`
}

// run serves until ctx ends, then drains requests in flight.
func (c *Config) run(ctx context.Context, logger *slog.Logger) error {
	reg := metrics.NewRegistry()
	authToken, serverTLS, err := c.access(logger)
	if err != nil {
		return err
	}
	watcher, err := reload.Watch(c.Rules, logger, reg)
	if err != nil {
		return err
	}

	lc, err := window.Dial(ctx, logger, &c.RedisFlags, &c.KafkaFlags, c.KeyPrefix, reg)
	if err != nil {
		return err
	}
	defer closeLogged(logger, "redis", lc)
	rdb, kc, parts, store := lc.Redis, lc.Kafka, lc.Parts, lc.Store
	if err := store.LoadScripts(ctx); err != nil {
		return err
	}
	taker, err := strict.New(strict.Config{Store: store, MaxBatch: c.TakeBatch, Timeout: max(c.RedisTimeout, 250*time.Millisecond), Logger: logger})
	if err != nil {
		return err
	}
	feedMetrics, err := feed.NewMetrics(reg, "floodgate_limiter_feed")
	if err != nil {
		return err
	}
	state := decide.NewBoundedState(c.StateMaxSubjects)
	pub, err := c.publisher(kc, logger)
	if err != nil {
		return err
	}
	var lpub decide.Publisher // nil, not a nil *Publisher, with --no-publish
	if pub != nil {
		defer closeLogged(logger, "producer", pub)
		lpub = pub
	}
	mode, err := decide.ParseFailureMode(c.FailureMode)
	if err != nil {
		return err
	}
	lim, err := decide.New(decide.Config{
		Store: store, Taker: taker, State: state, Partitions: parts.Get, Rules: watcher.Current, Publisher: lpub,
		Timeout: c.RedisTimeout, FailureMode: mode, Logger: logger, Registerer: reg,
		// The strict script counts with the limits it is handed: an RLS
		// take's descriptor limit is exact here.
		DescriptorLimits: true,
	})
	if err != nil {
		return err
	}
	rlsMode, err := decide.ParseRLSMode(c.RLSMode)
	if err != nil {
		return err
	}
	srv, err := decide.NewServer(decide.ServerConfig{
		RLSMaxConnectionAge: c.rlsMaxConnAge(), RLSMaxConnectionAgeGrace: c.RLSMaxConnAgeGrace, RLSNoOKHeaders: !c.RLSOKHeaders,
		Limiter: lim, HTTPAddr: c.HTTPAddr, RLSAddr: c.RLSAddr, RLSMode: rlsMode,
		AuthToken: authToken, MetricsAuth: c.MetricsAuth, MaxRequestBytes: c.MaxBytes, MaxConcurrentStreams: c.MaxStreams,
		TLS: serverTLS, Gatherer: reg, Logger: logger,
	})
	if err != nil {
		return err
	}
	admin, err := c.admin(authToken, serverTLS, c.Topic, store, watcher.Current, lim, state, reg, logger)
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	if err := admin.Start(); err != nil {
		return errors.Join(err, srv.Shutdown(ctx))
	}
	logger.Info("limiter started", "http", srv.HTTPAddr(), "rls", srv.RLSAddr(),
		"key_prefix", c.KeyPrefix, "redis_timeout", c.RedisTimeout, "failure_mode", c.FailureMode, "auth", authToken != "", "tls", serverTLS != nil)

	err = runUntilDone(ctx, srv, admin,
		watcher.Run,
		func(ctx context.Context) error { return parts.Run(ctx, 10*time.Second) },
		func(ctx context.Context) error {
			return decide.Sync(ctx, decide.SyncConfig{
				State: state, Source: store, Streams: rdb, Partitions: parts.Get, Metrics: feedMetrics, Logger: logger,
			})
		})
	logger.Info("limiter stopped", "err", err)
	return err
}

// runUntilDone runs tasks beside the started servers until ctx ends or
// one of them fails, then shuts the servers down.
func runUntilDone(ctx context.Context, srv *decide.Server, admin *adminServer, tasks ...func(context.Context) error) error {
	eg, gctx := errgroup.WithContext(ctx)
	for _, task := range tasks {
		eg.Go(func() error { return task(gctx) })
	}
	eg.Go(func() error {
		select {
		case <-gctx.Done():
			return nil
		case err := <-srv.Err():
			return err
		}
	})
	eg.Go(func() error { return admin.Wait(gctx) })
	err := eg.Wait()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return errors.Join(err, srv.Shutdown(sctx), admin.Shutdown(sctx))
}

// access is the limiter's token and TLS; it warns when the limiter
// listens beyond loopback with no token.
func (c *Config) access(logger *slog.Logger) (token string, tlsCfg *tls.Config, err error) {
	token, err = secretfile.Read("auth-token", c.AuthToken, c.AuthTokenFile)
	if err != nil {
		return "", nil, err
	}
	tlsCfg, err = c.ServerTLS(logger)
	if err != nil {
		return "", nil, err
	}
	if token == "" && (tlsfiles.BeyondLoopback(c.HTTPAddr) || c.RLSAddr != "off" && tlsfiles.BeyondLoopback(c.RLSAddr)) {
		logger.Warn("the limiter listens beyond loopback without a token: anyone who reaches it may check and take; set --auth-token-file",
			"http", c.HTTPAddr, "rls", c.RLSAddr)
	}
	return token, tlsCfg, nil
}

// publisher is the limiter's asynchronous publisher of the events it
// counts; nil with --no-publish.
func (c *Config) publisher(kc kafkaconn.Cluster, logger *slog.Logger) (*producer.Publisher, error) {
	if c.NoPublish {
		return nil, nil
	}
	return producer.New(producer.Config{
		Brokers: c.Brokers, Security: kc.Security, Topic: c.Topic, Async: true, NonBlocking: true, BatchTimeout: c.PublishLinger,
		Logger: logger.With("component", "producer"),
	})
}

// AdminFlags configure the limiter's admin endpoints (package operator).
type AdminFlags struct {
	AdminAddr      string   `name:"admin-addr" env:"FLOODGATE_ADMIN_ADDR" default:"127.0.0.1:8082" help:"Admin endpoints /v1/admin/{inspect,ban,unban,reset}; served only with --admin-token."`
	AdminToken     []string `name:"admin-token" env:"FLOODGATE_ADMIN_TOKEN" sep:"," help:"Admin tokens as name=secret (comma separated; secrets of 16+ bytes, none equal to --auth-token); the name is the operator recorded in the audit. Empty: no admin endpoints. Prefer --admin-token-file."`
	AdminTokenFile string   `name:"admin-token-file" env:"FLOODGATE_ADMIN_TOKEN_FILE" help:"File of admin tokens, name=secret, one a line or comma separated (wins over --admin-token)."`
	LiveGroup      string   `name:"live-group" env:"FLOODGATE_LIVE_GROUP" default:"floodgate-live" help:"The aggregator's live consumer group: a reset records its offset as the boundary of what was reset."`
}

// adminServer is the limiter's admin listener, or nothing (nil) when no
// admin token is configured.
type adminServer struct{ srv *operator.Server }

// admin builds the admin endpoints over the limiter's own store, rules,
// decisions and memory; they are off without an admin token.
func (f *AdminFlags) admin(authToken string, serverTLS *tls.Config, topic string, store *window.Store, set func() *rules.Set, lim *decide.Limiter, state *decide.State,
	reg prometheus.Registerer, logger *slog.Logger) (*adminServer, error) {
	specs := f.AdminToken
	if f.AdminTokenFile != "" {
		b, err := os.ReadFile(f.AdminTokenFile)
		if err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
		specs = strings.FieldsFunc(string(b), func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
		if len(specs) == 0 {
			return nil, fmt.Errorf("--admin-token-file %s holds no token", f.AdminTokenFile)
		}
	}
	if len(specs) == 0 {
		return &adminServer{}, nil
	}
	tokens, err := operator.ParseTokens(specs)
	if err != nil {
		return nil, err
	}
	for _, t := range tokens {
		if authToken != "" && t.Secret == authToken {
			return nil, fmt.Errorf("admin token %q: its secret is the --auth-token; give the admin endpoints a secret of their own", t.Name)
		}
	}
	writer, err := operator.NewWriter(store)
	if err != nil {
		return nil, err
	}
	op, err := operator.New(operator.Config{
		Store: store, Writer: writer, Rules: set, Checker: lim, Applied: state.Seq, Group: f.LiveGroup, Topic: topic,
		Logger: logger, Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	srv, err := operator.NewServer(operator.ServerConfig{Operator: op, Tokens: tokens, Addr: f.AdminAddr, TLS: serverTLS, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &adminServer{srv: srv}, nil
}

func (a *adminServer) Start() error {
	if a.srv == nil {
		return nil
	}
	return a.srv.Start()
}

// Wait returns when ctx ends, or with the error of a failed listener.
func (a *adminServer) Wait(ctx context.Context) error {
	if a.srv == nil {
		<-ctx.Done()
		return nil
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-a.srv.Err():
		if err != nil {
			return err
		}
		return errors.New("admin listener stopped")
	}
}

func (a *adminServer) Shutdown(ctx context.Context) error {
	if a.srv == nil {
		return nil
	}
	return a.srv.Shutdown(ctx)
}

// RLSFlags are the Envoy RLS settings beyond its address and mode. Envoy
// holds one connection per limiter for as long as it lives: an age limit is
// what spreads its calls over replicas added later (docs/integrate.md, "RLS
// port: health service and connection age").
type RLSFlags struct {
	RLSMaxConnAge      time.Duration `name:"rls-max-connection-age" env:"FLOODGATE_RLS_MAX_CONNECTION_AGE" default:"5m" help:"Close RLS connections this old (clients reconnect, so calls spread over new replicas); 0: never."`
	RLSMaxConnAgeGrace time.Duration `name:"rls-max-connection-age-grace" env:"FLOODGATE_RLS_MAX_CONNECTION_AGE_GRACE" default:"30s" help:"How long calls in flight on an aged RLS connection may finish."`
	RLSOKHeaders       bool          `name:"rls-ok-headers" env:"FLOODGATE_RLS_OK_HEADERS" default:"true" negatable:"" help:"Put the RateLimit header fields on OK RLS answers too (Envoy adds them to allowed responses); --no-rls-ok-headers: on OVER_LIMIT answers only."`
}

// rlsMaxConnAge maps the flag's 0 (never) to the server config's negative.
func (f RLSFlags) rlsMaxConnAge() time.Duration {
	if f.RLSMaxConnAge <= 0 {
		return -1
	}
	return f.RLSMaxConnAge
}
