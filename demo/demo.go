package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"floodgate/bench/harness"
	"floodgate/event"
	"floodgate/history"
	"floodgate/migrations"
	"floodgate/producer"
	"floodgate/rules"
	"floodgate/topics"
	"floodgate/window"
)

// Config says where the stack is and how big the scenario is. Zero values
// take the defaults named per field.
type Config struct {
	Bin         string   // the floodgate binary to run the services with; required
	Brokers     []string // required
	RedisAddr   string   // required
	PostgresURL string   // required
	Rules       string   // rules file; required
	Decisions   string   // decisions topic; default "floodgate.decisions"
	// KeyPrefix of the run's Redis keys. Default "fgdemo-<run>": each run
	// starts with empty counters, so its report compares like with like.
	KeyPrefix string
	// Duration of the traffic. Default 40s.
	Duration time.Duration
	// VisitRate is link visits per second. Default 800 (each visit is two
	// events: the link, for analytics, and the visitor's IP, for limits).
	VisitRate int
	// LogDir receives the services' logs. Default a new temporary directory.
	LogDir string
	Out    io.Writer // default os.Stdout
}

func (c *Config) validate() error {
	switch {
	case c.Bin == "":
		return errors.New("demo: no floodgate binary")
	case len(c.Brokers) == 0 || c.RedisAddr == "" || c.PostgresURL == "":
		return errors.New("demo: brokers, redis and postgres addresses are required")
	case c.Rules == "":
		return errors.New("demo: no rules file")
	}
	if c.Decisions == "" {
		c.Decisions = "floodgate.decisions"
	}
	if c.Duration == 0 {
		c.Duration = 40 * time.Second
	}
	if c.VisitRate == 0 {
		c.VisitRate = 800
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	return nil
}

// The attack: a few IPs try many e-mail addresses. 198.51.100.0/24 and
// 203.0.113.0/24 are documentation ranges (RFC 5737).
var (
	attackerIPs = []string{"203.0.113.7", "203.0.113.8", "203.0.113.9"}
	legitIP     = "198.51.100.23"
	legitEmail  = "alice@example.com"
	crawlerIP   = "198.51.100.99"
)

// Run performs the whole demo: services up, traffic, report, services down.
func Run(ctx context.Context, cfg Config) (err error) {
	if err := cfg.validate(); err != nil {
		return err
	}
	out := cfg.Out
	run := strconv.FormatInt(time.Now().Unix(), 36)
	topic := "floodgate.demo." + run
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "fgdemo-" + run
	}
	if cfg.LogDir == "" {
		if cfg.LogDir, err = os.MkdirTemp("", "floodgate-demo-"); err != nil {
			return fmt.Errorf("demo log dir: %w", err)
		}
	}

	say(out, "setting up: topic %s, migrations", topic)
	if _, err := topics.Ensure(ctx, cfg.Brokers, topics.Defaults(topic, "floodgate.events.dlq", cfg.Decisions)...); err != nil {
		return fmt.Errorf("demo topics: %w", err)
	}
	defer func() {
		if derr := topics.Delete(context.WithoutCancel(ctx), cfg.Brokers, topic); derr != nil {
			fmt.Fprintf(out, "could not delete %s: %v\n", topic, derr)
		}
	}()
	db, err := migrations.Open(ctx, cfg.PostgresURL)
	if err != nil {
		return err
	}
	if _, err := migrations.Up(ctx, db); err != nil {
		db.Close()
		return err
	}
	db.Close()
	pool, err := pgxpool.New(ctx, cfg.PostgresURL)
	if err != nil {
		return fmt.Errorf("demo postgres: %w", err)
	}
	defer pool.Close()
	q := history.NewQuerier(pool, "")
	before, err := totals(ctx, q)
	if err != nil {
		return err
	}

	svc, err := startServices(ctx, cfg, topic)
	if err != nil {
		return err
	}
	defer svc.stop(out)

	pub, err := producer.New(producer.Config{Brokers: cfg.Brokers, Topic: topic})
	if err != nil {
		return err
	}
	dec := watchDecisions(ctx, cfg.Brokers, cfg.Decisions)
	defer dec.close()

	say(out, "traffic for %s: %d link visits/s over 300 links (a few hot), a crawler, and from %s a credential-stuffing burst against login_failed from %d IPs",
		cfg.Duration, cfg.VisitRate, cfg.Duration/5, len(attackerIPs))
	sc := newScenario(cfg, pub)
	tctx, stopTraffic := context.WithTimeout(ctx, cfg.Duration)
	trafficDone := make(chan error, 1)
	go func() { trafficDone <- sc.run(tctx) }()
	probe := &prober{base: "http://" + svc.limiterAddr, out: out}
	tick := time.NewTicker(time.Second)
	var lastSent int64
	var lastDenies int
	start := time.Now()
loop:
	for {
		select {
		case err := <-trafficDone:
			stopTraffic()
			if err != nil {
				return fmt.Errorf("demo traffic: %w", err)
			}
			break loop
		case <-ctx.Done():
			stopTraffic()
			return ctx.Err()
		case <-tick.C:
		}
		sent := sc.sent.Load()
		m, _ := harness.Scrape(ctx, "http://"+svc.aggregatorMetrics+"/metrics")
		denies, shadows := dec.counts()
		fmt.Fprintf(out, "t=%3ds  produced %5d ev/s (%7d)  lag live %5.0f history %6.0f  denies %3d/s (%d, shadow %d)%s\n",
			int(time.Since(start).Seconds()), sent-lastSent, sent,
			m.Sum("floodgate_aggregator_lag_messages", `group="floodgate-live"`),
			m.Sum("floodgate_aggregator_lag_messages", `group="floodgate-history"`),
			denies-lastDenies, denies, shadows, probe.check(ctx, sc.attacking.Load()))
		lastSent, lastDenies = sent, denies
		for _, line := range dec.takeFresh() {
			fmt.Fprintln(out, line)
		}
	}
	tick.Stop()
	if err := pub.Close(); err != nil {
		return fmt.Errorf("demo producer: %w", err)
	}

	say(out, "traffic done; waiting for the aggregator to count every event")
	produced := sc.producedByAction()
	counted, err := waitCounted(ctx, q, before, produced, 2*time.Minute)
	report(out, produced, counted, sc, dec)
	if err != nil {
		return err
	}
	if err := reportLive(ctx, out, cfg, sc); err != nil {
		return err
	}
	fmt.Fprintln(out)
	d, err := history.LoadDashboard(ctx, q, "visit", time.Now(), 5)
	if err != nil {
		return err
	}
	if err := d.Write(out); err != nil {
		return err
	}
	fmt.Fprintf(out, `
Look further (history stays in PostgreSQL):
  go run ./cmd/floodgate query dashboard
  go run ./cmd/floodgate query top --action login_failed --last 1h
  go run ./cmd/floodgate query curve --action visit --kind link --last 30m
Run the services yourself and ask the limiter:
  go run ./cmd/floodgate aggregator &  go run ./cmd/floodgate limiter serve &
  curl -i 'http://127.0.0.1:8080/v1/check?action=login_failed&ip=203.0.113.7&email=bob@example.com'
Service logs of this run: %s
`, cfg.LogDir)
	return nil
}

func say(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "==> "+format+"\n", args...)
}

// services are the floodgate processes the demo runs.
type services struct {
	procs             []*harness.Proc
	aggregatorMetrics string
	limiterAddr       string
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startServices(ctx context.Context, cfg Config, topic string) (*services, error) {
	s := &services{}
	addrs := make([]string, 3)
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, fmt.Errorf("demo: free port: %w", err)
		}
		addrs[i] = a
	}
	s.aggregatorMetrics, s.limiterAddr = addrs[0], addrs[1]
	env := []string{
		"FLOODGATE_BROKERS=" + strings.Join(cfg.Brokers, ","),
		"FLOODGATE_REDIS_ADDR=" + cfg.RedisAddr,
		"FLOODGATE_POSTGRES_URL=" + cfg.PostgresURL,
		"FLOODGATE_RULES=" + cfg.Rules,
		"FLOODGATE_TOPIC=" + topic,
		"FLOODGATE_DECISIONS_TOPIC=" + cfg.Decisions,
	}
	specs := []harness.ProcConfig{
		{Name: "aggregator", Args: []string{"aggregator", "--metrics-addr", s.aggregatorMetrics, "--key-prefix", cfg.KeyPrefix}},
		{Name: "limiter", Args: []string{"limiter", "serve", "--http-addr", s.limiterAddr, "--rls-addr", addrs[2], "--key-prefix", cfg.KeyPrefix}},
		{Name: "roller", Args: []string{"roller", "run", "--every", "15s"}},
	}
	for _, p := range specs {
		p.Bin, p.Env, p.LogDir = cfg.Bin, env, cfg.LogDir
		proc, err := harness.Start(ctx, p)
		if err != nil {
			s.stop(io.Discard)
			return nil, err
		}
		s.procs = append(s.procs, proc)
		say(cfg.Out, "started %-10s pid %-7d log %s", p.Name, proc.Pid(), proc.LogPath)
	}
	for _, u := range []string{"http://" + s.aggregatorMetrics + "/healthz", "http://" + s.limiterAddr + "/readyz"} {
		if err := harness.WaitHTTP(ctx, u, time.Minute); err != nil {
			s.stop(io.Discard)
			return nil, fmt.Errorf("demo: %s not ready: %w", u, err)
		}
	}
	return s, nil
}

// stop ends the services gracefully (SIGTERM: each finishes and commits its
// in-flight batch) and says how each ended.
func (s *services) stop(out io.Writer) {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		err := p.Stop(20 * time.Second)
		status := "stopped cleanly"
		if err != nil {
			status = "stopped: " + err.Error()
		}
		say(out, "%s %s (peak RSS %d MiB)", p.Name(), status, p.PeakRSS()>>20)
	}
	s.procs = nil
}

// scenario publishes the demo's traffic and remembers what it published.
type scenario struct {
	cfg       Config
	pub       *producer.Publisher
	sent      atomic.Int64
	attacking atomic.Bool

	mu       sync.Mutex
	byAction map[string]int64
	bySub    map[string]int64 // "action kind:subject" -> events
}

func newScenario(cfg Config, pub *producer.Publisher) *scenario {
	return &scenario{cfg: cfg, pub: pub, byAction: map[string]int64{}, bySub: map[string]int64{}}
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

func (s *scenario) publish(ctx context.Context, evs []event.Event) error {
	if err := s.pub.Publish(ctx, evs...); err != nil {
		return err
	}
	s.mu.Lock()
	for _, e := range evs {
		n := max(e.N, 1) // zero N means the contract's default, 1
		s.byAction[e.Action] += n
		s.bySub[e.Action+" "+e.Key()] += n
	}
	s.mu.Unlock()
	s.sent.Add(int64(len(evs)))
	return nil
}

// run sends traffic in 100 ms ticks until ctx ends: visits all along, the
// attack in the middle three fifths, the crawler from the start.
func (s *scenario) run(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	links := rand.NewZipf(rng, 1.3, 4, 299)
	deadline, _ := ctx.Deadline()
	total := time.Until(deadline)
	attackFrom, attackTo := time.Now().Add(total/5), time.Now().Add(total*4/5)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	emails := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		now := time.Now()
		var evs []event.Event
		for range s.cfg.VisitRate / 10 {
			ip := fmt.Sprintf("198.18.%d.%d", rng.IntN(20), rng.IntN(250)+1)
			link := "l" + strconv.FormatUint(links.Uint64(), 36)
			evs = append(evs, event.Split("visit", now, map[string]string{"link": link, "ip": ip})...)
		}
		// A crawler opens 15 links a second: over the shadow rule's 600/m
		// after 40 s, reported but never denied.
		for range 2 {
			evs = append(evs, event.Event{ID: event.NewID(), Action: "visit", Kind: "ip", Subject: crawlerIP, TS: now})
		}
		attacking := now.After(attackFrom) && now.Before(attackTo)
		s.attacking.Store(attacking)
		if attacking {
			// Each attacker IP tries one new address per tick: 10 failed
			// logins a second per IP, each address tried a few times.
			for _, ip := range attackerIPs {
				email := fmt.Sprintf("user%d@example.com", emails%40)
				emails++
				evs = append(evs, event.Split("login_failed", now, map[string]string{"ip": ip, "email": email})...)
			}
		}
		if rng.IntN(150) == 0 { // the legitimate user mistypes, rarely
			evs = append(evs, event.Split("login_failed", now, map[string]string{"ip": legitIP, "email": legitEmail})...)
		}
		// Publish outlives the traffic deadline: a Publish cut short may
		// still deliver, and would then be counted but not tallied.
		if err := s.publish(context.WithoutCancel(ctx), evs); err != nil {
			return err
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
	l := p.get(ctx, url.Values{"action": {"login_failed"}, "ip": {legitIP}, "email": {legitEmail}})
	return fmt.Sprintf("  check attacker→%s alice→%s", a, l)
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

// decisions tallies the floodgate.decisions topic from now on.
type decisions struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	denies  int
	shadows int
	byRule  map[string]map[string]bool // rule -> subjects
	fresh   []string                   // first decisions of each rule and kind, not yet printed
}

func watchDecisions(ctx context.Context, brokers []string, topic string) *decisions {
	ctx, cancel := context.WithCancel(ctx)
	d := &decisions{cancel: cancel, byRule: map[string]map[string]bool{}}
	parts, err := topics.Partitions(ctx, brokers, topic)
	if err != nil {
		return d
	}
	for p := range parts[topic] {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p, MaxWait: 200 * time.Millisecond})
		if err := r.SetOffset(kafka.LastOffset); err != nil {
			r.Close()
			continue
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer r.Close()
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					return
				}
				var dec window.Decision
				if json.Unmarshal(m.Value, &dec) != nil {
					continue
				}
				d.add(dec)
			}
		}()
	}
	return d
}

func (d *decisions) add(dec window.Decision) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rule := dec.Rule + " " + strconv.FormatInt(dec.Limit.Count, 10) + "/" + rules.FormatWindow(dec.Limit.Window)
	if dec.Shadow {
		d.shadows++
		rule += " (shadow)"
	} else {
		d.denies++
	}
	if d.byRule[rule] == nil {
		d.byRule[rule] = map[string]bool{}
	}
	sub := dec.Kind + ":" + dec.Subject
	if !d.kindSeen(rule, dec.Kind) {
		d.fresh = append(d.fresh, fmt.Sprintf("       deny  %-26s %-28s count %d, until %s",
			rule, sub, dec.Count, dec.Until.Format("2006-01-02 15:04:05")))
	}
	d.byRule[rule][sub] = true
}

// kindSeen reports whether rule already denied a subject of kind: the demo
// prints the first deny of each rule and kind as it happens, not all of them.
func (d *decisions) kindSeen(rule, kind string) bool {
	for s := range d.byRule[rule] {
		if strings.HasPrefix(s, kind+":") {
			return true
		}
	}
	return false
}

// takeFresh returns the decisions to print now.
func (d *decisions) takeFresh() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.fresh
	d.fresh = nil
	return f
}

func (d *decisions) counts() (denies, shadows int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.denies, d.shadows
}

func (d *decisions) close() {
	d.cancel()
	d.wg.Wait()
}

func totals(ctx context.Context, q *history.Querier) (map[string]int64, error) {
	out := map[string]int64{}
	for _, a := range []string{"visit", "login_failed"} {
		n, err := q.Total(ctx, history.Key{Action: a})
		if err != nil {
			return nil, err
		}
		out[a] = n
	}
	return out, nil
}

// waitCounted polls PostgreSQL until each action's total grew by exactly
// what was produced, and returns the growth.
func waitCounted(ctx context.Context, q *history.Querier, before, produced map[string]int64, limit time.Duration) (map[string]int64, error) {
	deadline := time.Now().Add(limit)
	for {
		now, err := totals(ctx, q)
		if err != nil {
			return nil, err
		}
		counted := map[string]int64{}
		done := true
		for a, p := range produced {
			counted[a] = now[a] - before[a]
			if counted[a] != p {
				done = false
			}
		}
		if done {
			return counted, nil
		}
		if time.Now().After(deadline) {
			return counted, fmt.Errorf("demo: after %s PostgreSQL counted %v of %v produced", limit, counted, produced)
		}
		select {
		case <-ctx.Done():
			return counted, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func report(out io.Writer, produced, counted map[string]int64, sc *scenario, dec *decisions) {
	fmt.Fprintln(out)
	say(out, "report")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "action\tproduced\tcounted in PostgreSQL\t")
	for _, a := range []string{"visit", "login_failed"} {
		mark := "equal"
		if produced[a] != counted[a] {
			mark = "DIFFERENT"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", a, produced[a], counted[a], mark)
	}
	tw.Flush()
	fmt.Fprintln(out)
	dec.mu.Lock()
	defer dec.mu.Unlock()
	names := make([]string, 0, len(dec.byRule))
	for r := range dec.byRule {
		names = append(names, r)
	}
	sort.Strings(names)
	fmt.Fprintf(out, "decisions published: %d denies, %d shadow\n", dec.denies, dec.shadows)
	for _, r := range names {
		subs := make([]string, 0, len(dec.byRule[r]))
		for s := range dec.byRule[r] {
			subs = append(subs, s)
		}
		sort.Strings(subs)
		more := ""
		if len(subs) > 6 {
			more = fmt.Sprintf(" … +%d more", len(subs)-6)
			subs = subs[:6]
		}
		fmt.Fprintf(out, "  %-32s %s%s\n", r, strings.Join(subs, " "), more)
	}
}

// reportLive shows, for the attackers and the legitimate user, what was
// produced against what Redis holds for the last hour, and the deny record
// the limiter answers from.
func reportLive(ctx context.Context, out io.Writer, cfg Config, sc *scenario) error {
	rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
	defer rdb.Close()
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: cfg.KeyPrefix})
	if err != nil {
		return err
	}
	subs := append(append([]string(nil), attackerIPs...), legitIP)
	qs := make([]window.Query, len(subs))
	for i, ip := range subs {
		qs[i] = window.Query{Subject: window.Subject{Action: "login_failed", Kind: "ip", Subject: ip}, Windows: []time.Duration{time.Hour}}
	}
	states, err := st.Check(ctx, time.Now(), qs)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "login_failed by ip\tproduced\tlast hour in Redis\tdecision now\t")
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for i, ip := range subs {
		verdict := "allowed"
		if d := states[i].Deny; d != nil {
			verdict = fmt.Sprintf("denied by %s %d/%s until %s", d.Rule, d.Limit.Count, rules.FormatWindow(d.Limit.Window), d.Until.Format("2006-01-02 15:04:05"))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", ip, sc.bySub["login_failed ip:"+ip], states[i].Sums[0], verdict)
	}
	return tw.Flush()
}
