package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"floodgate/kafkaconn"
	"floodgate/secretfile"
	"floodgate/tlsfiles"
)

// Connection flags shared by subcommands. Embed the ones a subcommand needs;
// defaults point at scripts/stack (see `scripts/stack env`).

// KafkaConnFlags locate the Kafka cluster and say how to connect to it:
// TLS and SASL, for every client of the process (producers, consumer
// groups, admin calls).
type KafkaConnFlags = kafkaconn.Flags

// KafkaFlags locate the Kafka cluster and floodgate's topics.
type KafkaFlags struct {
	KafkaConnFlags
	Topic          string `name:"topic" env:"FLOODGATE_TOPIC" default:"floodgate.events" help:"Topic of access events."`
	DLQTopic       string `name:"dlq-topic" env:"FLOODGATE_DLQ_TOPIC" default:"floodgate.events.dlq" help:"Dead-letter topic for malformed events."`
	DecisionsTopic string `name:"decisions-topic" env:"FLOODGATE_DECISIONS_TOPIC" default:"floodgate.decisions" help:"Topic where new deny decisions are published."`
}

// secret is value, or the content of file when file is given.
func secret(flag, value, file string) (string, error) { return secretfile.Read(flag, value, file) }

// RedisFlags locate the Redis holding live counters and deny records: one
// server, a Redis Cluster (several seed addresses, or --redis-cluster), or
// a Sentinel-managed primary (--redis-sentinel-master); and how to connect
// (ACL user, TLS). Every process that talks to Redis takes these.
type RedisFlags struct {
	RedisAddr     []string `name:"redis-addr" env:"FLOODGATE_REDIS_ADDR" default:"127.0.0.1:16379" sep:"," help:"Redis address host:port; several, comma separated, are the seeds of a Redis Cluster (or the sentinels, with --redis-sentinel-master)."`
	RedisCluster  bool     `name:"redis-cluster" env:"FLOODGATE_REDIS_CLUSTER" help:"Use Redis Cluster even with one seed address."`
	RedisDB       int      `name:"redis-db" env:"FLOODGATE_REDIS_DB" default:"0" help:"Redis database number (single server only)."`
	RedisPoolSize int      `name:"redis-pool-size" env:"FLOODGATE_REDIS_POOL_SIZE" default:"64" help:"Redis connections (per cluster node)."`

	RedisURL          string `name:"redis-url" env:"FLOODGATE_REDIS_URL" help:"Redis URL, redis:// or rediss:// (TLS), as go-redis parses it (?addr=host:port adds cluster seeds); replaces --redis-addr, --redis-db and the credentials. Holds the password: prefer --redis-url-file."`
	RedisURLFile      string `name:"redis-url-file" env:"FLOODGATE_REDIS_URL_FILE" help:"File holding --redis-url (wins over it)."`
	RedisUsername     string `name:"redis-username" env:"FLOODGATE_REDIS_USERNAME" help:"Redis ACL username (empty: the default user)."`
	RedisPassword     string `name:"redis-password" env:"FLOODGATE_REDIS_PASSWORD" help:"Redis password (prefer --redis-password-file)."`
	RedisPasswordFile string `name:"redis-password-file" env:"FLOODGATE_REDIS_PASSWORD_FILE" help:"File holding the Redis password (wins over --redis-password)."`
	RedisTLS          bool   `name:"redis-tls" env:"FLOODGATE_REDIS_TLS" help:"Connect to Redis over TLS (implied by the other --redis-tls-* flags and by rediss://)."`
	RedisTLSCA        string `name:"redis-tls-ca" env:"FLOODGATE_REDIS_TLS_CA" help:"PEM file of the CA(s) trusted for Redis' certificate (default: the system's)."`
	RedisTLSCert      string `name:"redis-tls-cert" env:"FLOODGATE_REDIS_TLS_CERT" help:"PEM client certificate (mTLS), with --redis-tls-key."`
	RedisTLSKey       string `name:"redis-tls-key" env:"FLOODGATE_REDIS_TLS_KEY" help:"PEM key of --redis-tls-cert."`
	RedisTLSServer    string `name:"redis-tls-server-name" env:"FLOODGATE_REDIS_TLS_SERVER_NAME" help:"Name Redis' certificate must carry (default: the address dialled)."`

	RedisSentinelMaster       string `name:"redis-sentinel-master" env:"FLOODGATE_REDIS_SENTINEL_MASTER" help:"Sentinel: the master's name; --redis-addr are then the sentinels (with --redis-cluster: replicas serve no reads, all go to the primary)."`
	RedisSentinelPassword     string `name:"redis-sentinel-password" env:"FLOODGATE_REDIS_SENTINEL_PASSWORD" help:"Password of the sentinels (prefer --redis-sentinel-password-file)."`
	RedisSentinelPasswordFile string `name:"redis-sentinel-password-file" env:"FLOODGATE_REDIS_SENTINEL_PASSWORD_FILE" help:"File holding the sentinels' password."`
}

// redisOptions resolves the flags (files read now) into client options.
func (f *RedisFlags) redisOptions() (*redis.UniversalOptions, error) {
	opts := &redis.UniversalOptions{
		Addrs: f.RedisAddr, IsClusterMode: f.RedisCluster, DB: f.RedisDB, PoolSize: f.RedisPoolSize,
		ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: -1,
		MasterName: f.RedisSentinelMaster,
	}
	u, err := secret("redis-url", f.RedisURL, f.RedisURLFile)
	if err != nil {
		return nil, err
	}
	if u != "" {
		// go-redis' own parsers: the single-server one knows the DB, the
		// cluster one the extra seeds (?addr=).
		if f.RedisCluster || strings.Contains(u, "addr=") {
			co, err := redis.ParseClusterURL(u)
			if err != nil {
				return nil, fmt.Errorf("--redis-url: %w", redactURLError(err, u))
			}
			opts.Addrs, opts.Username, opts.Password, opts.TLSConfig, opts.IsClusterMode = co.Addrs, co.Username, co.Password, co.TLSConfig, true
		} else {
			o, err := redis.ParseURL(u)
			if err != nil {
				return nil, fmt.Errorf("--redis-url: %w", redactURLError(err, u))
			}
			opts.Addrs, opts.Username, opts.Password, opts.TLSConfig, opts.DB = []string{o.Addr}, o.Username, o.Password, o.TLSConfig, o.DB
		}
	}
	if f.RedisUsername != "" {
		opts.Username = f.RedisUsername
	}
	password, err := secret("redis-password", f.RedisPassword, f.RedisPasswordFile)
	if err != nil {
		return nil, err
	}
	if password != "" {
		opts.Password = password
	}
	if opts.SentinelPassword, err = secret("redis-sentinel-password", f.RedisSentinelPassword, f.RedisSentinelPasswordFile); err != nil {
		return nil, err
	}
	if f.RedisTLS || f.RedisTLSCA != "" || f.RedisTLSCert != "" || f.RedisTLSServer != "" {
		cfg, err := tlsfiles.Client(tlsfiles.ClientFiles{CA: f.RedisTLSCA, Cert: f.RedisTLSCert, Key: f.RedisTLSKey, ServerName: f.RedisTLSServer})
		if err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
		if opts.TLSConfig != nil && f.RedisTLSServer == "" && len(opts.Addrs) == 1 {
			cfg.ServerName = opts.TLSConfig.ServerName // rediss://host: verify host
		}
		opts.TLSConfig = cfg
	}
	return opts, nil
}

// redactURLError keeps a URL's password out of an error message.
func redactURLError(err error, raw string) error {
	msg := err.Error()
	if pu, perr := url.Parse(raw); perr == nil && pu.User != nil {
		if p, ok := pu.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return errors.New(msg)
}

// redisClient returns a client of the configured topology: *redis.Client
// for one server, *redis.ClusterClient for a cluster, a failover client
// for Sentinel. Every call honours its context deadline. Commands are
// never retried: a script whose reply was lost may have run (a strict take
// counted), and running it again would count twice; callers retry what is
// safe to retry themselves.
func (f *RedisFlags) redisClient() (redis.UniversalClient, error) {
	opts, err := f.redisOptions()
	if err != nil {
		return nil, err
	}
	rdb := redis.NewUniversalClient(opts)
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		cc.AddHook(&reloadOnError{cc: cc})
	}
	return rdb, nil
}

// reloadOnError asks a cluster client to reload the slot map after a
// failed call. A primary that dies answers no MOVED (its connections are
// refused), and go-redis otherwise keeps sending its slots to it until its
// periodic reload; the promoted replica is found on the next call instead.
type reloadOnError struct {
	cc   *redis.ClusterClient
	last atomic.Int64 // unix ms of the last reload asked for
}

func (h *reloadOnError) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *reloadOnError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.failed(ctx, err)
		return err
	}
}

func (h *reloadOnError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.failed(ctx, err)
		return err
	}
}

// failed reloads, at most every 100ms, on errors that say the topology
// moved: no reply at all (connection refused, timeouts), or a reply of a
// node that is no longer a primary or not ready.
func (h *reloadOnError) failed(ctx context.Context, err error) {
	if err == nil || errors.Is(err, redis.Nil) {
		return
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && !topologyError(rerr.Error()) {
		return // a script's or a command's own error
	}
	now := time.Now().UnixMilli()
	if last := h.last.Load(); now-last > 100 && h.last.CompareAndSwap(last, now) {
		h.cc.ReloadState(ctx)
	}
}

// ping checks that Redis answers within 5 s (every primary of a cluster);
// its error names Redis and the likely cause.
func (f *RedisFlags) ping(ctx context.Context, rdb redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
	} else {
		err = rdb.Ping(ctx).Err()
	}
	if err != nil {
		tlsOn := f.RedisTLS || f.RedisTLSCA != "" || f.RedisTLSCert != "" || strings.HasPrefix(f.RedisURL, "rediss:") || f.RedisURLFile != ""
		return fmt.Errorf("redis %s: %s%w", strings.Join(f.RedisAddr, ","), explainConnErr(err, tlsOn, "--redis-tls-ca", "--redis-tls"), err)
	}
	return nil
}

// explainConnErr is a short cause for a failed connection or login, to
// precede the error itself ("" when there is nothing to add).
func explainConnErr(err error, tlsOn bool, caFlag, tlsFlag string) string {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		recHeader tls.RecordHeaderError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &unknownCA):
		return "TLS: the server's certificate is not signed by a trusted CA (set " + caFlag + "): "
	case errors.As(err, &hostname):
		return "TLS: the server's certificate is not for this address: "
	case errors.As(err, &recHeader) || strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "TLS handshake answered by something that does not speak TLS (a plaintext port?): "
	case strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "invalid username-password"):
		return "authentication failed: wrong username or password: "
	case strings.Contains(msg, "NOAUTH"):
		return "authentication required: set a username and password: "
	case !tlsOn && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || strings.Contains(msg, "connection reset")):
		return "the server closed the connection (is it a TLS port? set " + tlsFlag + "): "
	}
	return ""
}

// PostgresFlags locate the PostgreSQL database holding history. TLS and
// client certificates go in the URL, as pgx parses them (sslmode=verify-full,
// sslrootcert, sslcert, sslkey).
type PostgresFlags struct {
	PostgresURL     string `name:"postgres-url" env:"FLOODGATE_POSTGRES_URL" default:"postgres://floodgate@127.0.0.1:15432/floodgate?sslmode=disable" help:"PostgreSQL connection URL (TLS: sslmode=verify-full&sslrootcert=...; client certificate: sslcert, sslkey). A password in it makes it a secret: prefer --postgres-url-file."`
	PostgresURLFile string `name:"postgres-url-file" env:"FLOODGATE_POSTGRES_URL_FILE" help:"File holding the PostgreSQL URL (wins over --postgres-url)."`
}

// postgresURL is the URL, read from its file when one is given.
func (f *PostgresFlags) postgresURL() (string, error) {
	return secret("postgres-url", f.PostgresURL, f.PostgresURLFile)
}

func topologyError(msg string) bool {
	for _, p := range []string{"CLUSTERDOWN", "TRYAGAIN", "READONLY", "MASTERDOWN", "LOADING"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// historyPool opens the history pool (historyPool) and checks at once that
// the server lets us in: a refused login or TLS handshake fails the start
// with its cause, while a server that is merely down is only logged, as
// historyPool's connections are made on use and retried.
func (f *PostgresFlags) historyPool(ctx context.Context, logger *slog.Logger) (*pgxpool.Pool, error) {
	u, err := f.postgresURL()
	if err != nil {
		return nil, err
	}
	pool, err := historyPool(u)
	if err != nil {
		return nil, err
	}
	if err := checkPostgres(ctx, pool); err != nil {
		if !refused(err) {
			logger.Warn("postgres does not answer yet; connecting on use", "err", err)
			return pool, nil
		}
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// checkPostgres pings within 10 s; its error names PostgreSQL, the server
// and the likely cause. pgx's errors carry no password.
func checkPostgres(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := pool.Ping(ctx)
	if err == nil {
		return nil
	}
	cc := pool.Config().ConnConfig
	addr := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	var pgErr *pgconn.PgError
	cause := explainConnErr(err, cc.TLSConfig != nil, "sslrootcert= in the URL", "sslmode= in the URL")
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "28P01":
		cause = "authentication failed: wrong user or password: "
	case errors.As(err, &pgErr) && pgErr.Code == "28000":
		cause = "the server refused this connection (pg_hba.conf: TLS or a client certificate required?): "
	case strings.Contains(err.Error(), "server refused TLS connection"):
		cause = "the server does not accept TLS (sslmode=disable, or enable ssl on the server): "
	}
	return fmt.Errorf("postgres %s: %s%w", addr, cause, err)
}

// refused says whether err is the server or TLS saying no (a start must
// fail), rather than the server not answering (it may come up later).
func refused(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return true
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		recHeader tls.RecordHeaderError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &recHeader) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "tls:") || strings.Contains(msg, "x509:") || strings.Contains(msg, "server refused TLS")
}

// ListenTLSFlags put a process's listeners behind TLS, optionally
// requiring client certificates (mTLS, as meshes use for Envoy → RLS).
// The files are read again when they change (cert-manager rotations).
type ListenTLSFlags struct {
	TLSCert     string `name:"tls-cert" env:"FLOODGATE_TLS_CERT" help:"PEM certificate (chain) the listeners serve; with --tls-key, they speak TLS only. Reloaded when the file changes."`
	TLSKey      string `name:"tls-key" env:"FLOODGATE_TLS_KEY" help:"PEM key of --tls-cert."`
	TLSClientCA string `name:"tls-client-ca" env:"FLOODGATE_TLS_CLIENT_CA" help:"PEM CA(s): require every client to present a certificate signed by them (mTLS)."`
}

// serverTLS is the listeners' TLS configuration, nil when not configured.
func (f *ListenTLSFlags) serverTLS(logger *slog.Logger) (*tls.Config, error) {
	files := tlsfiles.ServerFiles{Cert: f.TLSCert, Key: f.TLSKey, ClientCA: f.TLSClientCA}
	if !files.Enabled() {
		if f.TLSClientCA != "" {
			return nil, errors.New("--tls-client-ca needs --tls-cert and --tls-key")
		}
		return nil, nil
	}
	cfg, err := tlsfiles.Server(files, logger, "h2", "http/1.1")
	if err != nil {
		return nil, fmt.Errorf("listener %w", err)
	}
	return cfg, nil
}

// beyondLoopback says whether addr listens on more than loopback (an
// empty host or a wildcard is every interface).
func beyondLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true
	}
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}
