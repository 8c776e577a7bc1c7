// Package servicetest runs floodgate's services for integration tests as
// processes of the real binary (go build ./cmd/floodgate), so tests depend
// on their flags and public surfaces only, not on their internals: a
// limiter to ask, an aggregator to count. Each service is stopped (SIGTERM,
// then SIGKILL) when the test ends, and its log tail is shown when the test
// failed.
//
//	bin := servicetest.Build(t, servicetest.Floodgate)
//	st := servicetest.Stack{Brokers: brokers, RedisAddr: stacktest.RedisAddr(), Topic: topic, Prefix: prefix, Rules: rulesPath}
//	lim := servicetest.Limiter(t, bin, st)   // lim.URL is http://127.0.0.1:port
package servicetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
)

// Floodgate is the import path of the serving binary.
const Floodgate = "github.com/floodgate-dev/floodgate/cmd/floodgate"

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// Build compiles the main package pkg once per test process and returns the
// executable's path. The file lives under os.TempDir in a directory named
// after this module's root, so checkouts sharing a machine never run each
// other's builds; it is replaced atomically, so concurrent test processes
// do not see half-written files.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		tb.Fatalf("go env GOMOD: %v", err)
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(string(out)) + "\x00" + pkg))
	dir := filepath.Join(os.TempDir(), "floodgate-servicetest-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	if err := os.Rename(tmp, bin); err != nil {
		tb.Fatal(err)
	}
	built[pkg] = bin
	return bin
}

// Stack names what a test's services use. Empty fields keep the binary's
// defaults, which point at scripts/stack's services and floodgate's real
// topics and keys: tests set Topic and Prefix (stacktest.Topic,
// stacktest.Prefix) so that they never touch those.
type Stack struct {
	Brokers        []string
	RedisAddr      string
	PostgresURL    string // a database of the test's own (historytest.Pool)
	Topic          string // events
	DLQTopic       string // dead letters
	DecisionsTopic string
	Prefix         string // Redis key prefix
	Rules          string // rules file
}

func (s Stack) env() []string {
	var env []string
	add := func(k, v string) {
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	add("FLOODGATE_BROKERS", strings.Join(s.Brokers, ","))
	add("FLOODGATE_REDIS_ADDR", s.RedisAddr)
	add("FLOODGATE_POSTGRES_URL", s.PostgresURL)
	add("FLOODGATE_TOPIC", s.Topic)
	add("FLOODGATE_DLQ_TOPIC", s.DLQTopic)
	add("FLOODGATE_DECISIONS_TOPIC", s.DecisionsTopic)
	add("FLOODGATE_KEY_PREFIX", s.Prefix)
	add("FLOODGATE_RULES", s.Rules)
	return env
}

// Service is a running process of a test.
type Service struct {
	Addr string // its HTTP address, host:port
	URL  string // http://Addr
	Proc *childproc.Proc
}

// Start runs bin with args and env as a child of the test, waits until
// http://addr+ready answers 200, and stops it when the test ends.
func Start(tb testing.TB, name, bin, addr, ready string, env, args []string) *Service {
	tb.Helper()
	p, err := childproc.Start(context.Background(), childproc.Config{
		Name: name, Bin: bin, Args: args, Env: env, LogDir: tb.TempDir(),
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := p.Stop(15 * time.Second); err != nil {
			tb.Errorf("%s: %v", name, err)
		}
		if tb.Failed() {
			tb.Logf("%s log (last 40 lines): %s", name, p.Tail(40))
		}
	})
	if err := childproc.WaitHTTP(context.Background(), "http://"+addr+ready, time.Minute); err != nil {
		tb.Fatalf("%s not ready: %v; log: %s", name, err, p.Tail(20))
	}
	return &Service{Addr: addr, URL: "http://" + addr, Proc: p}
}

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	a, err := childproc.FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// Limiter runs `floodgate limiter serve` on st and returns its HTTP
// surface (Connect/gRPC, /v1/check, /v1/take). Its Redis budget is 2s
// unless args set --redis-timeout (the last one given wins): the tests
// check answers, not latency, and on a loaded CI machine the production
// 50ms turned a slow first take into a 429.
func Limiter(tb testing.TB, bin string, st Stack, args ...string) *Service {
	tb.Helper()
	addr := FreeAddr(tb)
	a := append([]string{"limiter", "serve", "--http-addr", addr, "--rls-addr", "off", "--redis-timeout", "2s"}, args...)
	return Start(tb, "limiter", bin, addr, "/readyz", st.env(), a)
}

// Aggregator runs `floodgate aggregator` on st (live and, unless args say
// --no-history, history groups, each under a consumer group of this test's
// own) and returns its metrics address. A dead-letter or decisions topic
// st leaves unnamed is one of the test's own, so that tests never write to
// floodgate's real topics (and the aggregator, which requires both to
// exist, starts on a fresh stack).
func Aggregator(tb testing.TB, bin string, st Stack, args ...string) *Service {
	tb.Helper()
	brokers := st.Brokers
	if len(brokers) == 0 {
		brokers = stacktest.Brokers(tb)
	}
	if st.DLQTopic == "" {
		st.DLQTopic = stacktest.Topic(tb, brokers, 1)
	}
	if st.DecisionsTopic == "" {
		st.DecisionsTopic = stacktest.Topic(tb, brokers, 1)
	}
	addr := FreeAddr(tb)
	group := "fgtest-" + strings.ReplaceAll(st.Topic, ".", "-")
	a := append([]string{"aggregator", "--metrics-addr", addr, "--live-group", group + "-live", "--history-group", group + "-history"}, args...)
	return Start(tb, "aggregator", bin, addr, "/healthz", st.env(), a)
}
