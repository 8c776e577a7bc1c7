// Package childproc runs a program as a child process of a test or a
// harness: its output goes to a log file whose tail can be shown when
// something fails, it is stopped gracefully (SIGTERM, then SIGKILL after a
// grace period), and its peak resident set size is sampled while it runs.
// With it come what starting a service needs: a free loopback port to give
// it and a wait until its HTTP endpoint answers.
//
//	addr, _ := childproc.FreePort()
//	p, err := childproc.Start(ctx, childproc.Config{Name: "limiter", Bin: bin, Args: args, LogDir: dir})
//	err = childproc.WaitHTTP(ctx, "http://"+addr+"/readyz", time.Minute)
//	...
//	err = p.Stop(10 * time.Second)
//
// It imports no floodgate package: the tests of any package, the benchmark
// and fault suites and the demo share it.
package childproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config describes a process to start.
type Config struct {
	// Name labels the process in logs and reports, e.g. "aggregator".
	Name string
	// Bin is the executable. Required.
	Bin string
	// Args are its arguments.
	Args []string
	// Env is appended to the current environment.
	Env []string
	// LogDir receives <Name>.log with stdout and stderr. Default os.TempDir().
	LogDir string
	// SampleEvery is the period of the VmHWM sampling. Default 100ms.
	SampleEvery time.Duration
}

// Proc is a started process whose peak resident set size is sampled from
// /proc/PID/status (VmHWM) until it exits: the kernel's high-water mark is
// exact, only its last reading before exit can be missed, and the sampling
// period bounds how much growth that last reading can miss.
type Proc struct {
	cfg     Config
	cmd     *exec.Cmd
	LogPath string
	Started time.Time

	mu      sync.Mutex
	peakKB  int64
	done    chan struct{}
	waitErr error
}

// Start starts the process. The context does not kill it: call Stop or Kill.
func Start(ctx context.Context, cfg Config) (*Proc, error) {
	if cfg.Bin == "" {
		return nil, errors.New("start process: no binary")
	}
	if cfg.LogDir == "" {
		cfg.LogDir = os.TempDir()
	}
	if cfg.SampleEvery == 0 {
		cfg.SampleEvery = 100 * time.Millisecond
	}
	logPath := filepath.Join(cfg.LogDir, cfg.Name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: open log: %w", cfg.Name, err)
	}
	fmt.Fprintf(f, "---- %s %s %s\n", time.Now().Format(time.RFC3339Nano), cfg.Bin, strings.Join(cfg.Args, " "))
	cmd := exec.Command(cfg.Bin, cfg.Args...)
	cmd.Env = append(os.Environ(), cfg.Env...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	p := &Proc{cfg: cfg, cmd: cmd, LogPath: logPath, Started: time.Now(), done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		_ = f.Close()
		close(p.done)
	}()
	go p.sample()
	return p, nil
}

// Run starts the process and waits for it to exit, returning its peak RSS.
func Run(ctx context.Context, cfg Config) (*Proc, error) {
	p, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		_ = p.Stop(5 * time.Second)
		return p, ctx.Err()
	}
	if err := p.Err(); err != nil {
		return p, fmt.Errorf("%s exited: %w (log %s: %s)", cfg.Name, err, p.LogPath, p.Tail(5))
	}
	return p, nil
}

// sample reads VmHWM every 5 ms for the first two seconds (short-lived
// commands), then every SampleEvery. wait4's ru_maxrss is no substitute:
// it includes the forked copy of this (large) process before exec.
func (p *Proc) sample() {
	for {
		p.readHWM()
		every := p.cfg.SampleEvery
		if time.Since(p.Started) < 2*time.Second {
			every = 5 * time.Millisecond
		}
		select {
		case <-p.done:
			return
		case <-time.After(every):
		}
	}
}

func (p *Proc) readHWM() {
	kb, err := VmHWM(p.Pid())
	if err != nil {
		return
	}
	p.mu.Lock()
	if kb > p.peakKB {
		p.peakKB = kb
	}
	p.mu.Unlock()
}

// VmHWM returns the peak resident set size of a live process, in KiB.
func VmHWM(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("pid %d: no VmHWM", pid)
}

// Pid of the process.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Name of the process.
func (p *Proc) Name() string { return p.cfg.Name }

// PeakRSS returns the highest VmHWM seen, in bytes.
func (p *Proc) PeakRSS() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peakKB << 10
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Alive reports whether the process has not exited.
func (p *Proc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Err is the process's exit error once it exited (nil for status 0).
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s %s: %w", sig, p.cfg.Name, err)
	}
	return nil
}

// Stop reads the peak RSS one last time, sends SIGTERM and waits up to
// grace for the exit, then SIGKILLs. A process that exited because of the
// SIGTERM is not an error.
func (p *Proc) Stop(grace time.Duration) error {
	if !p.Alive() {
		return nil
	}
	p.readHWM()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("stop %s: still running %s after SIGTERM, killed", p.cfg.Name, grace)
	}
}

// Kill sends SIGKILL to the process and waits for it to exit.
func (p *Proc) Kill() {
	if !p.Alive() {
		return
	}
	p.readHWM()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Tail returns the last n lines of the process's log, joined by " | ".
func (p *Proc) Tail(n int) string { return TailFile(p.LogPath, n) }

// TailFile returns the last n lines of a file, joined by " | ".
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// handedOut are the ports FreePort returned in this process.
var handedOut struct {
	sync.Mutex
	ports map[string]bool
}

// FreePort returns a loopback address with a port that was free a moment
// ago, and that it never returned before in this process: the kernel may
// hand a port just closed out again, and a test that asked for two
// addresses got one twice (its nginx could not bind beside its limiter).
func FreePort() (string, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[string]bool{}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := l.Addr().String()
		if err := l.Close(); err != nil {
			return "", err
		}
		if !handedOut.ports[addr] {
			handedOut.ports[addr] = true
			return addr, nil
		}
	}
	return "", errors.New("free port: the kernel kept handing out ports this process already used")
}

// WaitHTTP polls url until it answers 200, for at most timeout.
func WaitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last error %v)", url, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
