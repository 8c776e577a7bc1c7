package benchmark

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/bench/rlsload"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
)

// envoyRatelimit is envoyproxy/ratelimit, the reference of issue 27's take
// goal (floodgate's strict takes at parity with it, each counting every
// hit), built with `go install` from the Go module proxy. It is run beside
// the takes in the same step, so that the ratio is of one machine state:
// set against another day's Envoy figure, the takes' ratio is off by as
// much as the machine's speed moved (docs/profiles.md, "Envoy in the same
// run").
const envoyRatelimit = "github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36"

// envoyConfig is the strict take's rule as envoyproxy/ratelimit counts it:
// one INCRBY (and its EXPIRE) per hit, in fixed windows of a minute.
const envoyConfig = `domain: bench_strict
descriptors:
  - key: email
    rate_limit:
      unit: minute
      requests_per_unit: 1000000000
`

// envoyBin builds envoyproxy/ratelimit into the work directory, once.
func (b *bench) envoyBin(ctx context.Context) (string, error) {
	dir := filepath.Join(b.cfg.WorkDir, "envoy")
	bin := filepath.Join(dir, "service_cmd")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "install", envoyRatelimit)
	// Outside this module, with none of its flags: `go install pkg@version`
	// resolves Envoy's own go.mod.
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s: %w: %s", envoyRatelimit, err, strings.TrimSpace(string(out)))
	}
	return bin, nil
}

// envoy is envoyproxy/ratelimit running on a redis-server of its own,
// ready for the strict take's requests.
type envoy struct {
	b         *bench
	p         *childproc.Proc // nil until started
	cl        *rlsload.Client // nil until dialed
	stopRedis func() error
	meters    []cpuMeter
}

// startEnvoyRL builds and starts envoyproxy/ratelimit and its redis-server,
// and waits until it answers; on an error, what it started is stopped.
func (b *bench) startEnvoyRL(ctx context.Context) (*envoy, error) {
	bin, err := b.envoyBin(ctx)
	if err != nil {
		return nil, err
	}
	rdb, stopRedis, err := b.privateRedis(ctx, "envoy-redis")
	if err != nil {
		return nil, err
	}
	e := &envoy{b: b, stopRedis: stopRedis}
	if err := e.start(ctx, bin, rdb); err != nil {
		return nil, errors.Join(err, e.stop())
	}
	return e, nil
}

func (e *envoy) start(ctx context.Context, bin string, rdb *redis.Client) error {
	p, grpcAddr, err := e.b.startEnvoy(ctx, bin, rdb.Options().Addr)
	if err != nil {
		return err
	}
	e.p = p
	if e.cl, err = rlsload.Dial(grpcAddr, runtime.NumCPU()); err != nil {
		return err
	}
	if err := e.cl.WaitReady(ctx, shapeStrict, 30*time.Second); err != nil {
		return err
	}
	e.meters = []cpuMeter{{cpuServer, pidCPU(p.Pid())}, {cpuLoad, pidCPU(os.Getpid())}, redisMeter(rdb)}
	if m, err := e.b.brokerMeter(); err == nil {
		e.meters = append(e.meters, m)
	}
	return nil
}

// stop stops what start started, and the redis-server.
func (e *envoy) stop() error {
	var err error
	if e.cl != nil {
		err = e.cl.Close()
	}
	if e.p != nil {
		err = errors.Join(err, e.b.stopProc(e.p, "envoyproxy/ratelimit"))
	}
	return errors.Join(err, e.stopRedis())
}

// runs measures it closed loop at c=16 and c=64, as scenario sc.
func (e *envoy) runs(ctx context.Context, b *bench, sc string) ([]Lookup, error) {
	return b.measureWith(ctx, e.meters, "", sc, false, e.cl.Op(shapeStrict, rlsload.OK), []int{16, 64}, 0)
}

// startEnvoy writes envoyConfig where envoyproxy/ratelimit reads its
// rules, and starts bin on free loopback ports against the Redis at
// redisAddr; it returns the process and its gRPC address.
func (b *bench) startEnvoy(ctx context.Context, bin, redisAddr string) (*childproc.Proc, string, error) {
	root := filepath.Join(b.cfg.WorkDir, "envoy", "runtime")
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "bench.yaml"), []byte(envoyConfig), 0o644); err != nil {
		return nil, "", err
	}
	var ports [3]string // gRPC, HTTP, debug
	for i := range ports {
		addr, err := childproc.FreePort()
		if err != nil {
			return nil, "", err
		}
		ports[i] = addr
	}
	env := []string{"USE_STATSD=false", "LOG_LEVEL=warn", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + portOf(ports[0]), "HOST=127.0.0.1", "PORT=" + portOf(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + portOf(ports[2])}
	b.res.LookupCmds = append(b.res.LookupCmds, strings.Join(env, " ")+" service_cmd ("+envoyRatelimit+")")
	p, err := childproc.Start(ctx, childproc.Config{Name: "envoy-ratelimit", Bin: bin, Env: env, LogDir: b.cfg.WorkDir})
	return p, ports[0], err
}

// portOf is the port of a host:port address FreePort handed out.
func portOf(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// privateRedis starts a redis-server of its own on a free port, without
// persistence, and returns a client of it and its stop.
func (b *bench) privateRedis(ctx context.Context, name string) (*redis.Client, func() error, error) {
	addr, err := childproc.FreePort()
	if err != nil {
		return nil, nil, err
	}
	p, err := childproc.Start(ctx, childproc.Config{Name: name, Bin: "redis-server", LogDir: b.cfg.WorkDir,
		Args: []string{"--port", portOf(addr), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}})
	if err != nil {
		return nil, nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	stop := func() error { return errors.Join(rdb.Close(), p.Stop(15*time.Second)) }
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			return nil, nil, errors.Join(fmt.Errorf("%s on %s: not answering", name, addr), stop())
		}
		select {
		case <-ctx.Done():
			return nil, nil, errors.Join(ctx.Err(), stop())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return rdb, stop, nil
}
