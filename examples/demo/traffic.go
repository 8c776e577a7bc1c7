package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/stacktest/promtext"
	"github.com/floodgate-dev/floodgate/producer"
)

// The attack: a few IPs try many e-mail addresses. 198.51.100.0/24 and
// 203.0.113.0/24 are documentation ranges (RFC 5737), 198.18.0.0/15 the
// benchmarking range (RFC 2544).
//
// stufferIP is an address of the internal network, which rule login-failed
// allows (an office behind one address must not be locked out by its users'
// typos): only rule credential-stuffing, which counts the distinct e-mails
// an IP fails with, can stop it. The outside attackers trip login-failed
// first, whose deny lasts longer, so their deny records name that rule.
var (
	attackerIPs = []string{"203.0.113.7", "203.0.113.8", "203.0.113.9"}
	stufferIP   = "10.20.30.40"
	legitIP     = "198.51.100.23"
	legitEmail  = "alice@example.com"
	crawlerIP   = "198.51.100.99"
	spammerIP   = "203.0.113.66"
)

// scenario sends the demo's traffic and tallies what it produced: the
// events the shortener and the limiter published for its requests, and the
// login_failed events it published itself.
type scenario struct {
	cfg       Config
	shortener string
	pub       *producer.Publisher
	http      *http.Client
	codes     []string
	attacking atomic.Bool
	requests  atomic.Int64
	failed    atomic.Int64 // requests without an answer

	mu       sync.Mutex
	byAction map[string]int64
	bySub    map[string]int64 // "action kind:subject" -> events
	statuses map[int]int64    // visit answers by status
}

func newScenario(cfg Config, shortener string, pub *producer.Publisher) *scenario {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	return &scenario{cfg: cfg, shortener: shortener, pub: pub,
		http: &http.Client{Transport: tr, Timeout: 5 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		byAction: map[string]int64{}, bySub: map[string]int64{}, statuses: map[int]int64{}}
}

func (s *scenario) tally(action, key string, n int64) {
	s.mu.Lock()
	s.byAction[action] += n
	s.bySub[action+" "+key] += n
	s.mu.Unlock()
}

func (s *scenario) producedByAction() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(s.byAction))
	for k, v := range s.byAction {
		out[k] = v
	}
	return out
}

// create asks the shortener for a short link of long, from ip.
func (s *scenario) create(ctx context.Context, long, ip string) (*http.Response, []byte, error) {
	body, _ := json.Marshal(map[string]string{"url": long})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.shortener+"/links", bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", ip)
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	// The limiter counted and published the creation when it admitted it
	// (strict rule), whatever the shortener answered after.
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 {
		s.tally("link_create", "ip:"+ip, 1)
	}
	return resp, b, nil
}

// createRetrying creates a link, retrying after the limiter's degraded
// answers: a strict take fails closed when Redis does not answer within the
// limiter's timeout (a busy machine), and says when to try again.
func (s *scenario) createRetrying(ctx context.Context, long, ip string) (*http.Response, []byte, error) {
	for attempt := 1; ; attempt++ {
		resp, body, err := s.create(ctx, long, ip)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests || attempt == 5 {
			return resp, body, err
		}
		var d struct {
			Degraded   bool  `json:"degraded"`
			RetryAfter int64 `json:"retry_after"`
		}
		if json.Unmarshal(body, &d) != nil || !d.Degraded {
			return resp, body, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(time.Duration(max(d.RetryAfter, 1)) * time.Second):
		}
	}
}

// createLinks creates 300 links, four per IP (under the strict rule's
// 5/m), then lets a spammer create links until the shortener refuses, and
// shows that answer.
func (s *scenario) createLinks(ctx context.Context, out io.Writer) error {
	say(out, "creating 300 short links through the shortener (POST /links), 4 per client IP")
	for i := range 300 {
		ip := fmt.Sprintf("198.51.100.%d", 100+i/4)
		resp, body, err := s.createRetrying(ctx, fmt.Sprintf("https://example.com/articles/%d/%s", i, strings.Repeat("long-path-", 3)), ip)
		if err != nil {
			return fmt.Errorf("create link %d: %w", i, err)
		}
		var l struct{ Code string }
		if resp.StatusCode/100 != 2 || json.Unmarshal(body, &l) != nil || l.Code == "" {
			return fmt.Errorf("create link %d: %s %s", i, resp.Status, body)
		}
		s.codes = append(s.codes, l.Code)
	}
	fmt.Fprintf(out, "    e.g. %s/%s\n", s.shortener, s.codes[0])
	say(out, "a spammer at %s creates links as fast as it can (rule link-create, strict: counted by the limiter's Take)", spammerIP)
	for i := range 50 {
		resp, body, err := s.create(ctx, fmt.Sprintf("https://spam.example/%d", i), spammerIP)
		if err != nil {
			return fmt.Errorf("spam link %d: %w", i, err)
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			fmt.Fprintf(out, "\n    POST %s/links  (X-Forwarded-For: %s), link %d\n    → %s\n", s.shortener, spammerIP, i+1, resp.Status)
			for _, h := range []string{"Retry-After", "RateLimit-Policy", "RateLimit"} {
				if v := resp.Header.Get(h); v != "" {
					fmt.Fprintf(out, "    %s: %s\n", h, v)
				}
			}
			fmt.Fprintf(out, "    %s\n\n", strings.TrimSpace(string(body)))
			return nil
		}
	}
	return fmt.Errorf("the spammer created 50 links without a 429: is rule link-create in %s?", s.cfg.Rules)
}

// visit opens a short link as ip would, through its proxy (the demo).
func (s *scenario) visit(ctx context.Context, code, ip string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.shortener+"/"+code, nil)
	if err != nil {
		return
	}
	req.Header.Set("X-Forwarded-For", ip)
	s.requests.Add(1)
	resp, err := s.http.Do(req)
	if err != nil {
		s.failed.Add(1)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.mu.Lock()
	s.statuses[resp.StatusCode]++
	s.mu.Unlock()
	// A redirect is a visit: the shortener published its link's event and
	// its visitor's.
	if resp.StatusCode == http.StatusFound {
		s.tally("visit", "link:"+code, 1)
		s.tally("visit", "ip:"+ip, 1)
	}
}

// run sends traffic in 100 ms ticks until ctx ends: visits all along (a
// few workers, keep-alive), the attack in the middle three fifths, the
// crawler from the start.
func (s *scenario) run(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	links := rand.NewZipf(rng, 1.3, 4, uint64(len(s.codes)-1))
	deadline, _ := ctx.Deadline()
	total := time.Until(deadline)
	attackFrom, attackTo := time.Now().Add(total/5), time.Now().Add(total*4/5)
	work := make(chan [2]string, s.cfg.VisitRate)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := range work {
				s.visit(context.WithoutCancel(ctx), v[0], v[1])
			}
		}()
	}
	defer func() { close(work); wg.Wait() }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	emails, stuffed, tickN := 0, 0, 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		for range max(s.cfg.VisitRate/10, 1) {
			ip := fmt.Sprintf("198.18.%d.%d", rng.IntN(20), rng.IntN(250)+1)
			work <- [2]string{s.codes[links.Uint64()], ip}
		}
		// A crawler opens 20 links a second: over the shadow rule's 600/m
		// after 30 s, reported but never denied.
		for range 2 {
			work <- [2]string{s.codes[rng.IntN(len(s.codes))], crawlerIP}
		}
		now := time.Now()
		attacking := now.After(attackFrom) && now.Before(attackTo)
		s.attacking.Store(attacking)
		var evs []event.Event
		if attacking {
			// Each attacker IP tries one new address per tick: 10 failed
			// logins a second per IP, each address tried a few times.
			for _, ip := range attackerIPs {
				email := fmt.Sprintf("user%d@example.com", emails%40)
				emails++
				evs = append(evs, event.Split("login_failed", now, map[string]string{"ip": ip, "email": email})...)
			}
		}
		if attacking && tickN%2 == 0 {
			// The internal host tries a new address five times a second,
			// each once: 20 different ones are allowed an hour.
			email := fmt.Sprintf("staff%d@example.com", stuffed)
			stuffed++
			evs = append(evs, event.Split("login_failed", now, map[string]string{"ip": stufferIP, "email": email})...)
		}
		tickN++
		if rng.IntN(150) == 0 { // the legitimate user mistypes, rarely
			evs = append(evs, event.Split("login_failed", now, map[string]string{"ip": legitIP, "email": legitEmail})...)
		}
		if err := s.publish(ctx, evs); err != nil {
			return err
		}
	}
}

// publish sends the login app's events. Publish outlives the traffic
// deadline: a Publish cut short may still deliver, and would then be
// counted but not tallied.
func (s *scenario) publish(ctx context.Context, evs []event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	if err := s.pub.Publish(context.WithoutCancel(ctx), evs...); err != nil {
		return err
	}
	for _, e := range evs {
		s.tally(e.Action, e.Key(), max(e.N, 1))
	}
	return nil
}

// traffic runs the scenario for cfg.Duration with a status line a second.
func traffic(ctx context.Context, cfg Config, svc *services, sc *scenario, dec *decisions) error {
	out := cfg.Out
	say(out, "traffic for %s: %d link visits/s as HTTP requests to the shortener over %d links (a few hot), a crawler, and from %s a credential-stuffing burst against login_failed from %d IPs, and from %s (internal, allowed by rule login-failed) one new e-mail after another",
		cfg.Duration, cfg.VisitRate, len(sc.codes), cfg.Duration/5, len(attackerIPs), stufferIP)
	tctx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- sc.run(tctx) }()
	probe := &prober{base: svc.limiter, out: out}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastReq int64
	var lastDenies int
	start := time.Now()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("traffic: %w", err)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		req := sc.requests.Load()
		m, _ := promtext.Scrape(ctx, "http://"+svc.aggregatorMetrics+"/metrics")
		denies, shadows := dec.counts()
		fmt.Fprintf(out, "t=%3ds  visits %4d req/s (%6d, failed %d)  lag live %5.0f history %6.0f  denies %3d/s (%d, shadow %d)%s\n",
			int(time.Since(start).Seconds()), req-lastReq, req, sc.failed.Load(),
			m.Sum("floodgate_aggregator_lag_messages", `group="floodgate-live"`),
			m.Sum("floodgate_aggregator_lag_messages", `group="floodgate-history"`),
			denies-lastDenies, denies, shadows, probe.check(ctx, sc.attacking.Load()))
		lastReq, lastDenies = req, denies
		for _, line := range dec.takeFresh() {
			fmt.Fprintln(out, line)
		}
	}
}

// prober asks the limiter's HTTP surface about an attacker and about the
// legitimate user, as an nginx auth_request would, and prints the first
// denial in full.
type prober struct {
	base      string
	out       io.Writer
	shownDeny bool
}

func (p *prober) check(ctx context.Context, attacking bool) string {
	if !attacking && !p.shownDeny {
		return ""
	}
	a := p.get(ctx, url.Values{"action": {"login_failed"}, "ip": {attackerIPs[0]}, "email": {"user1@example.com"}})
	i := p.get(ctx, url.Values{"action": {"login_failed"}, "ip": {stufferIP}})
	l := p.get(ctx, url.Values{"action": {"login_failed"}, "ip": {legitIP}, "email": {legitEmail}})
	return fmt.Sprintf("  check attacker→%s internal→%s alice→%s", a, i, l)
}

func (p *prober) get(ctx context.Context, v url.Values) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	u := p.base + "/v1/check?" + v.Encode()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "error"
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusTooManyRequests && !p.shownDeny {
		p.shownDeny = true
		fmt.Fprintf(p.out, "\n    GET %s\n    → %s\n", u, resp.Status)
		for _, h := range []string{"Retry-After", "RateLimit-Policy", "RateLimit"} {
			if resp.Header.Get(h) != "" {
				fmt.Fprintf(p.out, "    %s: %s\n", h, resp.Header.Get(h))
			}
		}
		fmt.Fprintf(p.out, "    %s\n\n", strings.TrimSpace(string(body)))
	}
	return strconv.Itoa(resp.StatusCode)
}
