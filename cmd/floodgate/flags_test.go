package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	"github.com/redis/go-redis/v9"
)

func TestSecretFromFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "pw")
	if err := os.WriteFile(f, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := secret("redis-password", "flag-value", f); err != nil || v != "s3cret" {
		t.Fatalf("secret = %q, %v; want the file's, trimmed", v, err)
	}
	if v, _ := secret("redis-password", "flag-value", ""); v != "flag-value" {
		t.Fatalf("secret without a file = %q", v)
	}
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := secret("redis-password", "", empty); err == nil || !strings.Contains(err.Error(), "--redis-password-file") {
		t.Fatalf("empty file: %v", err)
	}
}

func TestRedisOptionsURL(t *testing.T) {
	f := RedisFlags{RedisURL: "rediss://app:hunter2hunter2@cache.example.com:6380/2", RedisPoolSize: 8}
	o, err := f.redisOptions()
	if err != nil {
		t.Fatal(err)
	}
	if o.Addrs[0] != "cache.example.com:6380" || o.Username != "app" || o.Password != "hunter2hunter2" || o.DB != 2 || o.TLSConfig == nil ||
		o.TLSConfig.ServerName != "cache.example.com" {
		t.Fatalf("options %+v", o)
	}
	if _, ok := redis.NewUniversalClient(o).(*redis.Client); !ok {
		t.Fatal("want a single-server client")
	}

	// A bad URL's error does not carry its password.
	f = RedisFlags{RedisURL: "rediss://app:hunter2hunter2@cache.example.com:6380/notadb"}
	if _, err := f.redisOptions(); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("bad url: %v", err)
	}

	// Cluster seeds from ?addr=.
	f = RedisFlags{RedisURL: "rediss://app:pw@node1:6379?addr=node2:6379"}
	if o, err = f.redisOptions(); err != nil || len(o.Addrs) != 2 || !o.IsClusterMode {
		t.Fatalf("cluster url: %+v, %v", o, err)
	}
	if _, ok := redis.NewUniversalClient(o).(*redis.ClusterClient); !ok {
		t.Fatal("want a cluster client")
	}
}

func TestRedisOptionsSentinel(t *testing.T) {
	f := RedisFlags{RedisAddr: []string{"s1:26379", "s2:26379"}, RedisSentinelMaster: "mymaster", RedisUsername: "app", RedisPassword: "pw"}
	o, err := f.redisOptions()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewUniversalClient(o)
	defer c.Close()
	if _, ok := c.(*redis.Client); !ok || o.MasterName != "mymaster" || o.Username != "app" {
		t.Fatalf("sentinel: %T %+v", c, o)
	}
}

func TestKafkaSecurity(t *testing.T) {
	f := KafkaConnFlags{KafkaSASLMechanism: "scram-sha-512", KafkaSASLUsername: "u", KafkaSASLPassword: "p"}
	sec, err := f.KafkaSecurity()
	if err != nil || sec.SASL == nil || sec.SASL.Name() != "SCRAM-SHA-512" || sec.TLS != nil {
		t.Fatalf("scram: %+v, %v", sec, err)
	}
	f = KafkaConnFlags{KafkaSASLMechanism: "plain", KafkaSASLUsername: "u"}
	if _, err := f.KafkaSecurity(); err == nil {
		t.Fatal("plain without a password accepted")
	}
	f = KafkaConnFlags{KafkaTLS: true}
	if sec, err = f.KafkaSecurity(); err != nil || sec.TLS == nil || sec.SASL != nil {
		t.Fatalf("tls: %+v, %v", sec, err)
	}
}

func TestBeyondLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": false, "[::1]:8080": false, "localhost:8080": false,
		":8080": true, "0.0.0.0:8080": true, "10.0.0.5:8080": true,
	} {
		if got := beyondLoopback(addr); got != want {
			t.Errorf("beyondLoopback(%q) = %v", addr, got)
		}
	}
}

// --help shows no secret given in the environment.
func TestHelpShowsNoSecrets(t *testing.T) {
	for _, k := range []string{"FLOODGATE_REDIS_PASSWORD", "FLOODGATE_KAFKA_SASL_PASSWORD", "FLOODGATE_AUTH_TOKEN", "FLOODGATE_POSTGRES_URL"} {
		t.Setenv(k, "postgres://u:topsecret-value@h/db")
	}
	for _, cmd := range []string{"limiter serve", "aggregator", "dashboard", "rebuild"} {
		var buf strings.Builder
		var cli CLI
		p, err := kong.New(&cli, kong.Name("floodgate"), kong.Writers(&buf, &buf), kong.Exit(func(int) {}))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = p.Parse(append(strings.Fields(cmd), "--help"))
		if !strings.Contains(buf.String(), "--redis-password-file") && cmd != "dashboard" {
			t.Fatalf("%s --help lacks the secret-file flags:\n%s", cmd, buf.String())
		}
		if strings.Contains(buf.String(), "topsecret") {
			t.Errorf("%s --help shows a secret from the environment", cmd)
		}
	}
}

// The aggregator takes one P more than the CPUs unless told otherwise:
// by --procs, by GOMAXPROCS, or by a quota that lowered the default.
func TestSetProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	log := slog.New(slog.DiscardHandler)
	for _, bad := range []int{-1, 1 << 30} {
		if err := setProcs(bad, log); err == nil {
			t.Fatalf("--procs %d accepted", bad)
		}
	}
	if err := setProcs(3, log); err != nil || runtime.GOMAXPROCS(0) != 3 {
		t.Fatalf("--procs 3: %v, GOMAXPROCS %d", err, runtime.GOMAXPROCS(0))
	}
	runtime.GOMAXPROCS(runtime.NumCPU())
	t.Setenv("GOMAXPROCS", "")
	if err := setProcs(0, log); err != nil || runtime.GOMAXPROCS(0) != runtime.NumCPU()+1 {
		t.Fatalf("default: %v, GOMAXPROCS %d, want %d", err, runtime.GOMAXPROCS(0), runtime.NumCPU()+1)
	}
	t.Setenv("GOMAXPROCS", "2")
	runtime.GOMAXPROCS(2)
	if err := setProcs(0, log); err != nil || runtime.GOMAXPROCS(0) != 2 {
		t.Fatalf("GOMAXPROCS=2 set: %v, GOMAXPROCS %d, want it kept", err, runtime.GOMAXPROCS(0))
	}
	if runtime.NumCPU() > 1 {
		os.Unsetenv("GOMAXPROCS")
		runtime.GOMAXPROCS(runtime.NumCPU() - 1) // as a quota leaves it
		if err := setProcs(0, log); err != nil || runtime.GOMAXPROCS(0) != runtime.NumCPU()-1 {
			t.Fatalf("under a quota: %v, GOMAXPROCS %d, want %d kept", err, runtime.GOMAXPROCS(0), runtime.NumCPU()-1)
		}
	}
}
