package decide_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// probeRules is the attack of issue 25 in small: one event each from many
// addresses against 2/1h, so that every address is at half its limit
// (held in the state) and the second event denies.
const probeRules = `
rules:
  - name: probe-hourly
    action: probe
    kinds: [ip]
    limits: [2/1h]
`

func withBoundedState(n int) envOpt {
	return func(c *decide.Config, _ *decide.ServerConfig) { c.State = decide.NewBoundedState(n) }
}

func withRegistry(reg *prometheus.Registry) envOpt {
	return func(c *decide.Config, _ *decide.ServerConfig) { c.Registerer = reg }
}

// metricValue returns the value of a metric without labels, -1 when absent.
func metricValue(tb testing.TB, reg *prometheus.Registry, name string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		}
	}
	return -1
}

// addrs returns n invented IPv6 addresses, each in a /64 of its own.
func addrs(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		k := from + i
		out[i] = fmt.Sprintf("2001:db8:%x:%x::1", k>>16, k&0xffff)
	}
	return out
}

// applyEach counts per events for each subject through the aggregator's
// write path, a batch per partition of at most 1000 events.
func (e *env) applyEach(tb testing.TB, action, kind string, subjects []string, per int, now time.Time) {
	tb.Helper()
	byPart := map[int][]event.Event{}
	for _, s := range subjects {
		// keyed by the subject counted, as a producer must (docs/rules.md)
		p := window.Partition(window.Subject{Action: action, Kind: kind, Subject: e.set.Subject(kind, s)}, testPartitions)
		for range per {
			byPart[p] = append(byPart[p], event.Event{V: 1, ID: event.NewID(), Action: action, Kind: kind, Subject: s, TS: now, N: 1})
		}
	}
	for p, evs := range byPart {
		for len(evs) > 0 {
			k := min(len(evs), 1000)
			e.applyTo(tb, p, evs[:k], now)
			evs = evs[k:]
		}
	}
}

// Past the cap on held subjects the limiter's memory stays bounded and its
// answers stay exact: a denied subject the state left out is denied (read
// from Redis), a near one allowed, an unseen one allowed after a Redis read,
// and once every state left out has expired, checks come from memory again.
func TestStateCapAnswersOverflowExactly(t *testing.T) {
	const capSubjects = 640
	reg := prometheus.NewRegistry()
	e := newEnv(t, withBoundedState(capSubjects), withRegistry(reg))
	e.set = mustRules(t, probeRules)
	ctx := context.Background()
	now := time.Now()
	near := addrs(0, 20000)
	denied := addrs(100000, 1000) // more than the cap: some are left out
	e.applyEach(t, "probe", "ip", near, 1, now)
	e.applyEach(t, "probe", "ip", denied, 2, now)
	if n := e.state.Len(); n > capSubjects+64 {
		t.Fatalf("state holds %d subjects past a cap of %d", n, capSubjects)
	}
	if e.state.Overflows() == 0 || e.state.Complete(time.Now()) {
		t.Fatalf("overflows %d, complete %v: want the overflow reported", e.state.Overflows(), e.state.Complete(time.Now()))
	}
	check := func(s string) decide.Decision {
		t.Helper()
		d, err := e.lim.Check(ctx, decide.Request{Action: "probe", Subjects: []decide.Subject{{Kind: "ip", Subject: s}}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	leftOut, held := 0, 0
	for _, s := range denied {
		_, isHeld, _ := e.state.Lookup(window.Subject{Action: "probe", Kind: "ip", Subject: e.set.Subject("ip", s)}, time.Now())
		if isHeld {
			held++
		} else {
			leftOut++
		}
		if d := check(s); d.Allowed {
			t.Fatalf("denied subject %s (held %v) allowed", s, isHeld)
		}
	}
	if leftOut == 0 || held == 0 {
		t.Fatalf("held %d, left out %d of the denied: want both", held, leftOut)
	}
	for _, s := range near[:200] {
		if d := check(s); !d.Allowed {
			t.Fatalf("subject %s at 1 of 2 denied: %+v", s, d.Denial)
		}
	}
	before := e.calls.n.Load()
	if d := check("2001:db8:ffff:1::1"); !d.Allowed {
		t.Fatalf("unseen subject denied: %+v", d.Denial)
	}
	if e.calls.n.Load() == before {
		t.Fatal("an unseen subject past the cap was answered from memory: want an exact read")
	}
	for name, want := range map[string]func(float64) bool{
		"floodgate_limiter_state_cap":                  func(v float64) bool { return v == capSubjects },
		"floodgate_limiter_state_subjects":             func(v float64) bool { return v > 0 && v <= capSubjects+64 },
		"floodgate_limiter_state_overflow_total":       func(v float64) bool { return v > 0 },
		"floodgate_limiter_state_complete":             func(v float64) bool { return v == 0 },
		"floodgate_limiter_state_overflow_reads_total": func(v float64) bool { return v > 0 },
	} {
		if v := metricValue(t, reg, name); !want(v) {
			t.Errorf("%s = %v", name, v)
		}
	}
	// Every state says nothing an hour on: absence proves "under half" again.
	if !e.state.Complete(now.Add(time.Hour + 2*time.Second)) {
		t.Fatal("state still incomplete once every left-out state expired")
	}
}

// An IPv6 address of kind ip counts by its /64, alike in the aggregator's
// counting (live.Applier.Apply, fed the addresses as sent) and in the
// limiter's checks, from memory and exact: addresses of one /64 add up,
// another /64 is apart; with ipv6_prefix 128 each address counts alone.
func TestIPv6CountedByPrefix(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name   string
		kinds  string
		denied bool
	}{
		{"default /64", "", true},
		{"per address", "kinds:\n  ip: {ipv6_prefix: 128}\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.set = mustRules(t, probeRules+tt.kinds)
			now := time.Now()
			// three addresses of one /64, one event each; a producer keys
			// them by the subject counted (the prefix), so all three land
			// on that subject's partition
			p := window.Partition(window.Subject{Action: "probe", Kind: "ip", Subject: e.set.Subject("ip", "2001:db8:7:7::1")}, testPartitions)
			var evs []event.Event
			for _, a := range []string{"2001:db8:7:7::1", "2001:db8:7:7::2", "2001:db8:7:7:ffff::3"} {
				evs = append(evs, event.Event{V: 1, ID: event.NewID(), Action: "probe", Kind: "ip", Subject: a, TS: now, N: 1})
			}
			e.applyTo(t, p, evs, now)
			for _, exact := range []bool{false, true} {
				d, err := e.lim.Check(ctx, decide.Request{Action: "probe", Exact: exact, Subjects: []decide.Subject{{Kind: "ip", Subject: "2001:db8:7:7::4"}}})
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed == tt.denied {
					t.Errorf("exact=%v: a fourth address of the /64 allowed=%v, want %v", exact, d.Allowed, !tt.denied)
				}
				d, err = e.lim.Check(ctx, decide.Request{Action: "probe", Exact: exact, Subjects: []decide.Subject{{Kind: "ip", Subject: "2001:db8:7:8::1"}}})
				if err != nil || !d.Allowed {
					t.Errorf("exact=%v: another /64: %+v %v, want allowed", exact, d, err)
				}
			}
			// a take publishes the subject counted, so its key places it
			if _, err := e.lim.Take(ctx, decide.Request{Action: "probe", Subjects: []decide.Subject{{Kind: "ip", Subject: "2001:db8:7:9::5"}}}); err != nil {
				t.Fatal(err)
			}
			e.pub.mu.Lock()
			defer e.pub.mu.Unlock()
			if want := e.set.Subject("ip", "2001:db8:7:9::5"); len(e.pub.plain) != 1 || e.pub.plain[0].Subject != want {
				t.Errorf("published %+v, want one event of %s", e.pub.plain, want)
			}
		})
	}
}
