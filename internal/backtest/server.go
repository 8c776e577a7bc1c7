package backtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a private, throwaway redis-server: a unix socket in a
// temporary directory, no TCP port, nothing saved. The replay is its only
// client; Close kills it and removes the directory.
type server struct {
	cmd  *exec.Cmd
	dir  string
	out  *tailBuffer
	done chan struct{}
	err  error // of Wait, once done is closed
}

// startServer starts bin and returns it with a client, once it answers.
func startServer(ctx context.Context, bin string, pool int) (*server, *redis.Client, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, nil, fmt.Errorf("backtest: redis-server %q not found (apt-get install redis-server, or --redis-server PATH, or --scratch-redis ADDR): %w", bin, err)
	}
	dir, err := os.MkdirTemp("", "floodgate-backtest-")
	if err != nil {
		return nil, nil, fmt.Errorf("backtest: temp dir for redis-server: %w", err)
	}
	sock := filepath.Join(dir, "redis.sock")
	s := &server{dir: dir, out: &tailBuffer{max: 4096}, done: make(chan struct{})}
	s.cmd = exec.Command(path,
		"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--loglevel", "warning", "--logfile", "",
		"--maxmemory-policy", "noeviction")
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	dieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("backtest: start %s: %w", path, err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	rdb := redis.NewClient(&redis.Options{
		Network: "unix", Addr: sock, PoolSize: pool,
		// A second of a busy partition is one script run: give it time.
		ReadTimeout: time.Minute, ContextTimeoutEnabled: true, MaxRetries: -1,
	})
	if err := s.wait(ctx, rdb); err != nil {
		_ = rdb.Close()
		_ = s.Close()
		return nil, nil, err
	}
	return s, rdb, nil
}

// wait polls PING until the server answers, it exits, or 10 s pass.
func (s *server) wait(ctx context.Context, rdb *redis.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		err := rdb.Ping(pctx).Err()
		pcancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("backtest: redis-server exited (%v): %s", s.err, s.out.String())
		case <-ctx.Done():
			return fmt.Errorf("backtest: redis-server did not answer: %w (output: %s)", err, s.out.String())
		case <-time.After(delay):
		}
	}
}

// Close kills the server and removes its directory.
func (s *server) Close() error {
	_ = s.cmd.Process.Kill()
	<-s.done
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("backtest: remove %s: %w", s.dir, err)
	}
	return nil
}

// peakMemory reads used_memory_peak of INFO memory.
func peakMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("backtest: redis INFO memory: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory_peak:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("backtest: redis INFO memory: no used_memory_peak")
}

// tailBuffer keeps the last max bytes written: the server's last words.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(t.buf.String())
}
