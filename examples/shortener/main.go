// Command shortener is the design notes' URL shortener, as a client of
// floodgate: links in PostgreSQL (its own schema and migrations), link
// creation limited per client IP by a strict rule (the limiter's Take),
// visits checked against the visit rules and published as events for
// floodgate's history. It links floodgate's public client packages only.
//
//	go run ./examples/shortener --addr 127.0.0.1:8088
//	curl -s -d url=https://example.com/some/long/path http://127.0.0.1:8088/links
//	curl -i http://127.0.0.1:8088/<code>
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/floodgate-dev/floodgate/examples/shortener/links"
	"github.com/floodgate-dev/floodgate/examples/shortener/service"
	"github.com/floodgate-dev/floodgate/limiter/limiterclient"
	"github.com/floodgate-dev/floodgate/limiter/limitermw"
	"github.com/floodgate-dev/floodgate/producer"
)

// CLI is the shortener's configuration: flags with FLOODGATE_* environment
// fallbacks (those of the stack are shared with floodgate's binary, so
// `eval "$(scripts/stack env)"` points both at the same services).
type CLI struct {
	Addr                  string     `name:"addr" env:"FLOODGATE_SHORTENER_ADDR" default:"127.0.0.1:8088" help:"Listen address (port 0 picks one)."`
	BaseURL               string     `name:"base-url" env:"FLOODGATE_SHORTENER_BASE_URL" help:"Public prefix of short links. Default: http://<listen address>."`
	Schema                string     `name:"schema" env:"FLOODGATE_SHORTENER_SCHEMA" default:"shortener" help:"PostgreSQL schema of the links and their migrations."`
	TrustedProxies        []string   `name:"trusted-proxies" env:"FLOODGATE_SHORTENER_TRUSTED_PROXIES" sep:"," help:"Proxies (CIDRs) whose X-Forwarded-For names the client, e.g. 127.0.0.1/32 behind a local nginx (X-Real-IP is never read)."`
	PostgresURL           string     `name:"postgres-url" env:"FLOODGATE_POSTGRES_URL" default:"postgres://floodgate@127.0.0.1:15432/floodgate?sslmode=disable" help:"PostgreSQL connection URL (TLS: sslmode=verify-full&sslrootcert=...). Prefer --postgres-url-file when it holds a password."`
	PostgresURLFile       string     `name:"postgres-url-file" env:"FLOODGATE_POSTGRES_URL_FILE" help:"File holding the PostgreSQL URL (wins over --postgres-url)."`
	Brokers               []string   `name:"brokers" env:"FLOODGATE_BROKERS" default:"127.0.0.1:19092" sep:"," help:"Kafka bootstrap brokers, comma separated."`
	KafkaTLSCA            string     `name:"kafka-tls-ca" env:"FLOODGATE_KAFKA_TLS_CA" help:"PEM CA trusted for the brokers: connect over TLS (default: plaintext)."`
	KafkaSASLMechanism    string     `name:"kafka-sasl-mechanism" env:"FLOODGATE_KAFKA_SASL_MECHANISM" default:"none" enum:"none,plain,scram-sha-256,scram-sha-512" help:"SASL mechanism: none, plain (over TLS only), scram-sha-256, scram-sha-512."`
	KafkaSASLUsername     string     `name:"kafka-sasl-username" env:"FLOODGATE_KAFKA_SASL_USERNAME" help:"SASL username."`
	KafkaSASLPasswordFile string     `name:"kafka-sasl-password-file" env:"FLOODGATE_KAFKA_SASL_PASSWORD_FILE" help:"File holding the SASL password."`
	Topic                 string     `name:"topic" env:"FLOODGATE_TOPIC" default:"floodgate.events" help:"Topic of access events."`
	LimiterURL            string     `name:"limiter-url" env:"FLOODGATE_LIMITER_URL" default:"http://127.0.0.1:8080" help:"floodgate limiter's HTTP address."`
	LimiterToken          string     `name:"limiter-token" env:"FLOODGATE_AUTH_TOKEN" help:"Bearer token of the limiter, if it requires one (prefer --limiter-token-file)."`
	LimiterTokenFile      string     `name:"limiter-token-file" env:"FLOODGATE_AUTH_TOKEN_FILE" help:"File holding the limiter's token."`
	LimiterTLSCA          string     `name:"limiter-tls-ca" env:"FLOODGATE_LIMITER_TLS_CA" help:"PEM CA trusted for an https --limiter-url (default: the system's)."`
	LogLevel              slog.Level `name:"log-level" env:"FLOODGATE_LOG_LEVEL" default:"info" help:"Log level."`
	LogFormat             string     `name:"log-format" env:"FLOODGATE_LOG_FORMAT" default:"text" enum:"text,json" help:"Log format: text or json."`
}

func main() {
	var cli CLI
	kong.Parse(&cli, kong.Name("shortener"), kong.Description("A URL shortener guarded by floodgate."), kong.UsageOnError())
	opts := &slog.HandlerOptions{Level: cli.LogLevel}
	logger := slog.New(slog.NewTextHandler(os.Stderr, opts))
	if cli.LogFormat == "json" {
		logger = slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cli, logger); err != nil {
		fmt.Fprintf(os.Stderr, "shortener: %v\n", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then drains requests and flushes events.
func run(ctx context.Context, cli CLI, logger *slog.Logger) (err error) {
	proxies, err := limitermw.ParseProxies(cli.TrustedProxies...)
	if err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	pgURL, err := secret(cli.PostgresURL, cli.PostgresURLFile)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	if err := links.Migrate(ctx, pool, cli.Schema); err != nil {
		return err
	}
	token, err := secret(cli.LimiterToken, cli.LimiterTokenFile)
	if err != nil {
		return err
	}
	var limiterTLS *tls.Config
	if strings.HasPrefix(cli.LimiterURL, "https:") {
		if limiterTLS, err = tlsTrusting(cli.LimiterTLSCA); err != nil {
			return fmt.Errorf("limiter: %w", err)
		}
	}
	lc, err := limiterclient.New(limiterclient.Config{BaseURL: cli.LimiterURL, Token: token, TLS: limiterTLS})
	if err != nil {
		return err
	}
	sec, err := cli.kafkaSecurity()
	if err != nil {
		return err
	}
	pub, err := producer.New(producer.Config{Brokers: cli.Brokers, Security: sec, Topic: cli.Topic, Async: true,
		Logger: logger.With("component", "producer")})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, pub.Close()) }()

	ln, err := net.Listen("tcp", cli.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cli.Addr, err)
	}
	if cli.BaseURL == "" {
		cli.BaseURL = "http://" + ln.Addr().String()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h, err := service.New(service.Config{
		Links: links.NewStore(pool, cli.Schema), Limiter: lc, Publisher: pub, BaseURL: cli.BaseURL,
		TrustedProxies: proxies, Logger: logger, Registerer: reg, Gatherer: reg,
	})
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	logger.Info("shortener started", "addr", ln.Addr().String(), "base_url", cli.BaseURL, "limiter", cli.LimiterURL, "topic", cli.Topic, "schema", cli.Schema)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	logger.Info("shortener stopped", "err", err)
	return err
}

// kafkaSecurity is how the producer reaches the brokers: TLS when a CA is
// given, SASL when a mechanism is (PLAIN over TLS only).
func (cli CLI) kafkaSecurity() (producer.Security, error) {
	var sec producer.Security
	if cli.KafkaTLSCA != "" {
		tc, err := tlsTrusting(cli.KafkaTLSCA)
		if err != nil {
			return sec, fmt.Errorf("kafka: %w", err)
		}
		sec.TLS = tc
	}
	if cli.KafkaSASLMechanism == "none" || cli.KafkaSASLMechanism == "" {
		return sec, nil
	}
	password, err := secret("", cli.KafkaSASLPasswordFile)
	if err != nil {
		return sec, err
	}
	if cli.KafkaSASLMechanism == "plain" {
		if sec.TLS == nil {
			return sec, errors.New("kafka sasl plain without --kafka-tls-ca: the password would cross in clear")
		}
		sec.SASL = plain.Mechanism{Username: cli.KafkaSASLUsername, Password: password}
		return sec, nil
	}
	algo := scram.SHA256
	if cli.KafkaSASLMechanism == "scram-sha-512" {
		algo = scram.SHA512
	}
	if sec.SASL, err = scram.Mechanism(algo, cli.KafkaSASLUsername, password); err != nil {
		return sec, fmt.Errorf("kafka sasl: %w", err)
	}
	return sec, nil
}

// secret is value, or the first line of file when one is given.
func secret(value, file string) (string, error) {
	if file == "" {
		return value, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s is empty", file)
	}
	return v, nil
}

// tlsTrusting is a client configuration trusting the CAs in caFile (the
// system's when empty).
func tlsTrusting(caFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return tc, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	tc.RootCAs = x509.NewCertPool()
	if !tc.RootCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	return tc, nil
}
