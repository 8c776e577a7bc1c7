// Package limiterbench measures the limiter in process and over HTTP
// against a real Redis (make bench): lookups per second and latency per
// scenario, surface and concurrency.
package limiterbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"floodgate/limiter"
	"floodgate/rules"
	"floodgate/strict"
	"floodgate/window"
)

// Config configures Run.
type Config struct {
	// Redis runs the window scripts. Required; the client must honour
	// context deadlines (go-redis: ContextTimeoutEnabled).
	Redis window.Redis
	// KeyPrefix of the bench's keys; they are left to expire (at most an
	// hour and a minute). Required: use one of its own.
	KeyPrefix string
	// Duration of each run. Default 3s.
	Duration time.Duration
	// Concurrency levels. Default 1, 16, 64.
	Concurrency []int
	// Scenarios: "allowed" (Check of an IP and an e-mail under the
	// login-failed limits: 4 windows from 1s to 1d each), "denied"
	// (Check of a denied subject: answered from the cache), "strict"
	// (Take of a strict rule that admits: check and count in one script).
	// Default all three.
	Scenarios []string
	// Surfaces: "inproc" (Limiter calls) and "http" (GET /v1/check and
	// POST /v1/take over loopback with keep-alive). Default both.
	Surfaces []string
	// Limiter settings.
	Timeout     time.Duration
	FailureMode limiter.FailureMode
	Logger      *slog.Logger
}

// Result is one run.
type Result struct {
	Surface, Scenario string
	Concurrency       int
	Ops, Errors       int64
	Elapsed           time.Duration
	PerSec            float64
	P50, P99, P999    time.Duration
	Degraded          int64 // answers by the failure mode
}

const benchRules = `
rules:
  - name: login-failed
    action: login_failed
    kinds: [ip, email]
    limits: [2/s, 5/m, 10/h, 100/d]
    message: Too many failed logins.
  - name: blocked
    action: blocked
    kinds: [ip]
    limits: [1/1h]
    message: Blocked.
  - name: reset
    action: password_reset
    kinds: [email]
    limits: [1000000000/1m, 1000000000/1h]
    strict: true
    message: Too many resets.
`

const benchSubjects = 10_000

// Run measures the limiter against a real Redis: lookups per second and
// latency percentiles for each surface, scenario and concurrency.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Redis == nil || cfg.KeyPrefix == "" {
		return nil, errors.New("bench: redis and key prefix are required")
	}
	if cfg.Duration == 0 {
		cfg.Duration = 3 * time.Second
	}
	if len(cfg.Concurrency) == 0 {
		cfg.Concurrency = []int{1, 16, 64}
	}
	if len(cfg.Scenarios) == 0 {
		cfg.Scenarios = []string{"allowed", "denied", "strict"}
	}
	if len(cfg.Surfaces) == 0 {
		cfg.Surfaces = []string{"inproc", "http"}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	set, err := rules.Parse([]byte(benchRules))
	if err != nil {
		return nil, fmt.Errorf("bench rules: %w", err)
	}
	store, err := window.NewStore(cfg.Redis, window.StoreConfig{Prefix: cfg.KeyPrefix, Partitions: func() int { return 12 }})
	if err != nil {
		return nil, err
	}
	taker, err := strict.New(strict.Config{Store: store})
	if err != nil {
		return nil, err
	}
	if err := benchSeed(ctx, taker, set); err != nil {
		return nil, err
	}
	lim, err := limiter.New(limiter.Config{
		Store: store, Taker: taker, Rules: func() *rules.Set { return set }, Timeout: cfg.Timeout,
		FailureMode: cfg.FailureMode, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, surface := range cfg.Surfaces {
		var do func(ctx context.Context, scenario string, rng *rand.Rand) (limiter.Decision, error)
		var stop func()
		switch surface {
		case "inproc":
			do = func(ctx context.Context, scenario string, rng *rand.Rand) (limiter.Decision, error) {
				req := benchRequest(scenario, rng)
				if scenario == "strict" {
					return lim.Take(ctx, req)
				}
				return lim.Check(ctx, req)
			}
			stop = func() {}
		case "http":
			srv, err := limiter.NewServer(limiter.ServerConfig{Limiter: lim, HTTPAddr: "127.0.0.1:0", RLSAddr: "off", Logger: cfg.Logger})
			if err != nil {
				return nil, err
			}
			if err := srv.Start(); err != nil {
				return nil, err
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}
			base := "http://" + srv.HTTPAddr()
			do = func(ctx context.Context, scenario string, rng *rand.Rand) (limiter.Decision, error) {
				return benchHTTP(ctx, client, base, scenario, rng)
			}
			stop = func() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				if err := srv.Shutdown(sctx); err != nil {
					cfg.Logger.Warn("bench: shutdown", "err", err)
				}
			}
		default:
			return nil, fmt.Errorf("bench: unknown surface %q (want inproc or http)", surface)
		}
		for _, sc := range cfg.Scenarios {
			if sc != "allowed" && sc != "denied" && sc != "strict" {
				stop()
				return nil, fmt.Errorf("bench: unknown scenario %q (want allowed, denied or strict)", sc)
			}
			for _, c := range cfg.Concurrency {
				r := benchRun(ctx, c, cfg.Duration, func(ctx context.Context, rng *rand.Rand) (bool, error) {
					d, err := do(ctx, sc, rng)
					if err == nil && (sc == "denied") == d.Allowed && !d.Degraded {
						err = fmt.Errorf("bench %s: unexpected decision allowed=%v", sc, d.Allowed)
					}
					return d.Degraded, err
				})
				r.Surface, r.Scenario = surface, sc
				out = append(out, r)
				if ctx.Err() != nil {
					stop()
					return out, ctx.Err()
				}
			}
		}
		stop()
	}
	return out, nil
}

// benchSeed puts one event on each allowed subject (so the checks read
// real buckets at every level) and two on the denied one.
func benchSeed(ctx context.Context, store limiter.Taker, set *rules.Set) error {
	now := time.Now()
	big := []window.EvalLimit{{Limit: rules.Limit{Count: 1 << 40, Window: time.Second}}}
	var qs []window.EvalQuery
	flush := func() error {
		if len(qs) == 0 {
			return nil
		}
		_, _, err := store.Take(ctx, now, qs, 1)
		qs = qs[:0]
		return err
	}
	for i := range benchSubjects {
		for _, k := range []string{"ip", "email"} {
			qs = append(qs, window.EvalQuery{
				Subject:   window.Subject{Action: "login_failed", Kind: k, Subject: benchSubject(k, i)},
				MaxWindow: set.MaxWindowFor("login_failed", k), Limits: big, Count: true,
			})
		}
		if len(qs) >= 500 {
			if err := flush(); err != nil {
				return fmt.Errorf("bench seed: %w", err)
			}
		}
	}
	qs = append(qs, window.EvalQuery{
		Subject:   window.Subject{Action: "blocked", Kind: "ip", Subject: "192.0.2.66"},
		MaxWindow: set.MaxWindowFor("blocked", "ip"), Limits: big, Count: true,
	})
	if err := flush(); err != nil {
		return fmt.Errorf("bench seed: %w", err)
	}
	return nil
}

func benchSubject(kind string, i int) string {
	if kind == "ip" {
		return "198.18." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	return "user" + strconv.Itoa(i) + "@example.com"
}

func benchRequest(scenario string, rng *rand.Rand) limiter.Request {
	i := rng.IntN(benchSubjects)
	switch scenario {
	case "denied":
		return limiter.Request{Action: "blocked", Subjects: []limiter.Subject{{Kind: "ip", Subject: "192.0.2.66"}}}
	case "strict":
		return limiter.Request{Action: "password_reset", Subjects: []limiter.Subject{{Kind: "email", Subject: benchSubject("email", i)}}}
	}
	return limiter.Request{Action: "login_failed", Subjects: []limiter.Subject{{Kind: "ip", Subject: benchSubject("ip", i)}, {Kind: "email", Subject: benchSubject("email", i)}}}
}

func benchHTTP(ctx context.Context, client *http.Client, base, scenario string, rng *rand.Rand) (limiter.Decision, error) {
	req := benchRequest(scenario, rng)
	q := url.Values{"action": {req.Action}}
	for _, s := range req.Subjects {
		q.Add(s.Kind, s.Subject)
	}
	method, path := http.MethodGet, "/v1/check?"
	if scenario == "strict" {
		method, path = http.MethodPost, "/v1/take?"
	}
	hreq, err := http.NewRequestWithContext(ctx, method, base+path+q.Encode(), nil)
	if err != nil {
		return limiter.Decision{}, err
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return limiter.Decision{}, err
	}
	var body struct {
		Degraded bool `json:"degraded"`
	}
	derr := json.NewDecoder(resp.Body).Decode(&body)
	if err := resp.Body.Close(); err != nil {
		return limiter.Decision{}, err
	}
	if derr != nil {
		return limiter.Decision{}, fmt.Errorf("http %d: body: %w", resp.StatusCode, derr)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return limiter.Decision{Allowed: true, Degraded: body.Degraded}, nil
	case http.StatusTooManyRequests:
		return limiter.Decision{Degraded: body.Degraded}, nil
	}
	return limiter.Decision{}, fmt.Errorf("http %d", resp.StatusCode)
}

// benchRun calls op from c goroutines for d and measures each call.
func benchRun(ctx context.Context, c int, d time.Duration, op func(context.Context, *rand.Rand) (bool, error)) Result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	lats := make([][]time.Duration, c)
	errCount := make([]int64, c)
	degCount := make([]int64, c)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			l := make([]time.Duration, 0, 1<<16)
			for ctx.Err() == nil {
				t := time.Now()
				deg, err := op(ctx, rng)
				el := time.Since(t)
				if ctx.Err() != nil {
					break
				}
				if err != nil {
					errCount[w]++
					continue
				}
				if deg {
					degCount[w]++
				}
				l = append(l, el)
			}
			lats[w] = l
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	r := Result{Concurrency: c, Elapsed: elapsed}
	for w := range c {
		all = append(all, lats[w]...)
		r.Errors += errCount[w]
		r.Degraded += degCount[w]
	}
	slices.Sort(all)
	r.Ops = int64(len(all))
	r.PerSec = float64(r.Ops) / elapsed.Seconds()
	r.P50, r.P99, r.P999 = quantile(all, 0.50), quantile(all, 0.99), quantile(all, 0.999)
	return r
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)))
	return sorted[min(i, len(sorted)-1)]
}

// WriteText prints results as aligned text.
func WriteText(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "%-7s %-8s %5s %12s %10s %10s %10s %8s %8s\n", "surface", "scenario", "conc", "lookups/s", "p50", "p99", "p99.9", "errors", "degraded")
	for _, r := range rs {
		fmt.Fprintf(w, "%-7s %-8s %5d %12.0f %10s %10s %10s %8d %8d\n", r.Surface, r.Scenario, r.Concurrency, r.PerSec,
			fmtLat(r.P50), fmtLat(r.P99), fmtLat(r.P999), r.Errors, r.Degraded)
	}
}

// WriteMarkdown prints results as a Markdown table.
func WriteMarkdown(w io.Writer, rs []Result) {
	fmt.Fprintln(w, "| surface | scenario | concurrency | lookups/s | p50 | p99 | p99.9 | errors | degraded |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %s | %d | %.0f | %s | %s | %s | %d | %d |\n", r.Surface, r.Scenario, r.Concurrency, r.PerSec,
			fmtLat(r.P50), fmtLat(r.P99), fmtLat(r.P999), r.Errors, r.Degraded)
	}
}

func fmtLat(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + "µs"
	default:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + "ms"
	}
}
