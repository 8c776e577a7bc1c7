// Package redisconn holds how floodgate's processes reach Redis: one
// server, a Redis Cluster or a Sentinel-managed primary, with ACL users and
// TLS, from flags every process that talks to Redis shares. Its clients never
// retry a command on their own (a script whose reply was lost may have run),
// and a cluster client reloads its slot map at once when a primary dies.
package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/secretfile"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles"
)

// Flags locate the Redis holding live counters and deny records: one
// server, a Redis Cluster (several seed addresses, or --redis-cluster), or
// a Sentinel-managed primary (--redis-sentinel-master); and how to connect
// (ACL user, TLS). Every process that talks to Redis takes these.
type Flags struct {
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

// Options resolves the flags (files read now) into client options.
func (f *Flags) Options() (*redis.UniversalOptions, error) {
	opts := &redis.UniversalOptions{
		Addrs: f.RedisAddr, IsClusterMode: f.RedisCluster, DB: f.RedisDB, PoolSize: f.RedisPoolSize,
		ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: -1,
		MasterName: f.RedisSentinelMaster,
	}
	u, err := secretfile.Read("redis-url", f.RedisURL, f.RedisURLFile)
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
	password, err := secretfile.Read("redis-password", f.RedisPassword, f.RedisPasswordFile)
	if err != nil {
		return nil, err
	}
	if password != "" {
		opts.Password = password
	}
	if opts.SentinelPassword, err = secretfile.Read("redis-sentinel-password", f.RedisSentinelPassword, f.RedisSentinelPasswordFile); err != nil {
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

// Client returns a client of the configured topology: *redis.Client
// for one server, *redis.ClusterClient for a cluster, a failover client
// for Sentinel. Every call honours its context deadline. Commands are
// never retried: a script whose reply was lost may have run (a strict take
// counted), and running it again would count twice; callers retry what is
// safe to retry themselves.
func (f *Flags) Client() (redis.UniversalClient, error) {
	opts, err := f.Options()
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

// Ping checks that Redis answers within 5 s (every primary of a cluster);
// its error names Redis and the likely cause.
func (f *Flags) Ping(ctx context.Context, rdb redis.UniversalClient) error {
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
		return fmt.Errorf("redis %s: %s%w", strings.Join(f.RedisAddr, ","), tlsfiles.Explain(err, tlsOn, "--redis-tls-ca", "--redis-tls"), err)
	}
	return nil
}

func topologyError(msg string) bool {
	for _, p := range []string{"CLUSTERDOWN", "TRYAGAIN", "READONLY", "MASTERDOWN", "LOADING"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
