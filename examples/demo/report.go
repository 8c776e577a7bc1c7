package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/internal/dashboard/dashboardtest"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// actions are the actions the demo produces, in report order.
var actions = []string{"visit", "link_create", "login_failed"}

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
				var dec window.DecisionMessage
				if json.Unmarshal(m.Value, &dec) != nil {
					continue
				}
				d.add(dec)
			}
		}()
	}
	return d
}

func (d *decisions) add(dec window.DecisionMessage) {
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

// waitRule waits until rule (as reported: "name count/window") denied
// subject, or limit passes; it reports whether it did.
func (d *decisions) waitRule(ctx context.Context, rule, subject string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		d.mu.Lock()
		ok := d.byRule[rule][subject]
		d.mu.Unlock()
		if ok || time.Now().After(deadline) {
			return ok
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (d *decisions) close() {
	d.cancel()
	d.wg.Wait()
}

func totals(ctx context.Context, q *history.Querier) (map[string]int64, error) {
	out := map[string]int64{}
	for _, a := range actions {
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
	for _, a := range actions {
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
func reportLive(ctx context.Context, out io.Writer, cfg Config, topic, prefix string, sc *scenario) error {
	rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
	defer rdb.Close()
	parts, err := topics.Partitions(ctx, cfg.Brokers, topic)
	if err != nil {
		return err
	}
	n := parts[topic]
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: prefix, Partitions: func() int { return n }})
	if err != nil {
		return err
	}
	subs := append(append([]string(nil), attackerIPs...), stufferIP, legitIP)
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

// checkDashboard loads the dashboard in headless Chromium, as the
// dashboard's own test does, and compares what it shows with PostgreSQL.
func checkDashboard(ctx context.Context, out io.Writer, cfg Config, dashURL string, q *history.Querier, logDir string) error {
	fmt.Fprintln(out)
	say(out, "the dashboard in headless Chromium: %s", dashURL)
	links := history.Key{Action: "visit", Kind: "link"}
	want, err := q.Total(ctx, links)
	if err != nil {
		return err
	}
	b, err := dashboardtest.Start(ctx, cfg.Chromium, filepath.Join(logDir, "chromium"))
	if err != nil {
		return fmt.Errorf("%w (scripts/stack up installs chromium)", err)
	}
	defer b.Close()
	if _, err := b.Load(ctx, dashURL); err != nil {
		return err
	}
	// The roller or a late batch may still move the total: wait for the
	// page to show PostgreSQL's.
	if err := b.WaitTotal(ctx, want); err != nil {
		return err
	}
	p, err := b.Read(ctx)
	if err != nil {
		return err
	}
	png, err := b.Screenshot(ctx)
	if err != nil {
		return err
	}
	shots := []string{filepath.Join(logDir, "dashboard.png")}
	if cfg.Screenshot != "" {
		shots = append(shots, cfg.Screenshot)
	}
	for _, f := range shots {
		if err := os.WriteFile(f, png, 0o644); err != nil {
			return fmt.Errorf("screenshot: %w", err)
		}
	}
	top := "none"
	if len(p.TopDay) > 0 {
		top = fmt.Sprintf("%s (%d)", p.TopDay[0].Subject, p.TopDay[0].Value)
	}
	fmt.Fprintf(out, "    visits by link ever: %d shown = %d in PostgreSQL; last hour %d; hottest link of the day %s\n", p.Total, want, p.LastHour, top)
	// Unique visitors (the aggregator runs with --visitors visit=ip): read
	// after the page showed PostgreSQL's total, from the same render.
	wantVis, err := q.TotalVisitors(ctx, links)
	if err != nil {
		return err
	}
	topVis := "none"
	if len(p.TopVisitors) > 0 {
		topVis = fmt.Sprintf("%s (%d)", p.TopVisitors[0].Subject, p.TopVisitors[0].Value)
	}
	fmt.Fprintf(out, "    unique visitors of links ever: %d shown, %d in PostgreSQL; last hour %d; most visited by distinct IPs today %s\n",
		p.Visitors, wantVis, p.VisitorsLastHour, topVis)
	if p.Visitors != wantVis {
		return fmt.Errorf("the dashboard shows %d unique visitors, PostgreSQL %d", p.Visitors, wantVis)
	}
	fmt.Fprintf(out, "    curves: hour %d (per %s), day %d (per %s), month %d (per %s), year %d (per %s); %d deny decisions listed\n",
		p.Curves["hour"], p.Steps["hour"], p.Curves["day"], p.Steps["day"], p.Curves["month"], p.Steps["month"], p.Curves["year"], p.Steps["year"], len(p.Decisions))
	fmt.Fprintf(out, "    screenshot: %s\n", strings.Join(shots, ", "))
	if errs := b.ConsoleErrors(); len(errs) > 0 {
		return fmt.Errorf("the dashboard logged console errors: %q", errs)
	}
	fmt.Fprintln(out, "    no console errors")
	return nil
}
