package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
)

// TestRedisSentinel: with --redis-sentinel-master, floodgate asks the
// sentinels for the primary (go-redis' failover client) and logs in with
// the password. A private redis-server and sentinel run for the test.
func TestRedisSentinel(t *testing.T) {
	brokers := stacktest.Brokers(t)
	server := stacktest.RedisServer(t)
	bin := servicetest.Build(t, servicetest.Floodgate)
	dir := t.TempDir()
	const pw = "sentinel-test-password"
	primary, sentinel := servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	_, pport, _ := strings.Cut(primary, ":")
	_, sport, _ := strings.Cut(sentinel, ":")
	run := func(name string, args ...string) {
		cmd := exec.Command(server, args...)
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	}
	run("primary", "--bind", "127.0.0.1", "--port", pport, "--save", "", "--appendonly", "no", "--requirepass", pw, "--dir", dir)
	conf := filepath.Join(dir, "sentinel.conf")
	sconf := fmt.Sprintf("bind 127.0.0.1\nport %s\ndir %s\nsentinel monitor mymaster 127.0.0.1 %s 1\nsentinel auth-pass mymaster %s\n", sport, dir, pport, pw)
	if err := os.WriteFile(conf, []byte(sconf), 0o600); err != nil {
		t.Fatal(err)
	}
	run("sentinel", conf, "--sentinel")
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer sc.Close()
	stacktest.WaitFor(t, "the sentinel knows the primary", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		addr, err := sc.GetMasterAddrByName(ctx, "mymaster").Result()
		return err == nil && len(addr) == 2 && addr[1] == pport
	})

	topic := stacktest.Topic(t, brokers, 1)
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte("rules:\n  - name: s\n    action: sentinel_test\n    kinds: [ip]\n    limits: [5/m]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inspect := func(password string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "inspect", "--action", "sentinel_test", "ip=203.0.113.5",
			"--topic", topic, "--key-prefix", "fgtest-sentinel", "--rules", rules,
			"--redis-addr", sentinel, "--redis-sentinel-master", "mymaster", "--redis-password", password, "--brokers", strings.Join(brokers, ","))
		cmd.Env = append(os.Environ(), "FLOODGATE_REDIS_CLUSTER=false")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := inspect(pw); err != nil {
		t.Fatalf("inspect through the sentinel: %v\n%s", err, out)
	}
	if out, err := inspect("wrong"); err == nil || !strings.Contains(out, "wrong username or password") {
		t.Fatalf("a wrong password through the sentinel: %v\n%s", err, out)
	}
}
