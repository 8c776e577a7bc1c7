package benchmark

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/bench/rlsload"
	"github.com/floodgate-dev/floodgate/internal/rules"
)

func closedRun(sc string, c int, perSec float64, p99 time.Duration) Lookup {
	return Lookup{Scenario: sc, Result: rlsload.Result{Concurrency: c, PerSec: perSec, P99: p99}}
}

func pacedRun(sc string, rate float64, p99 time.Duration) Lookup {
	return Lookup{Scenario: sc, Result: rlsload.Result{Rate: rate, PerSec: rate, P99: p99}}
}

func TestLookupGoals(t *testing.T) {
	ms := time.Millisecond
	base := []Lookup{
		closedRun(scNoop, 16, 10000, 2*ms), closedRun(scNoop, 64, 12000, 8*ms), pacedRun(scNoop, 5000, ms),
	}
	checks := func(ratio float64, extra time.Duration) []Lookup {
		var ls []Lookup
		for _, sc := range []string{scAllowedOne, scAllowedFour, scDenied} {
			ls = append(ls, closedRun(sc, 16, 10000*ratio, 2*ms+extra), closedRun(sc, 64, 12000*ratio, 8*ms+extra), pacedRun(sc, 5000, ms+extra))
		}
		return ls
	}
	takes := func(c16, c64 float64) []Lookup {
		return []Lookup{closedRun(scStrict, 16, c16, 0), closedRun(scStrict, 64, c64, 0)}
	}
	for _, tc := range []struct {
		name string
		runs []Lookup
		want []string // verdict of each goal: throughput, p99, takes, takes against Envoy (none here)
	}{
		{"all met", append(append(base, checks(0.85, ms)...), takes(11700, 13950)...), []string{"met", "met", "met", "not measured"}},
		{"slow checks", append(append(base, checks(0.79, 0)...), takes(20000, 20000)...), []string{"not met", "met", "met", "not measured"}},
		{"p99 over by more than 1 ms", append(append(base, checks(1, ms+time.Microsecond)...), takes(20000, 20000)...), []string{"met", "not met", "met", "not measured"}},
		{"slow takes", append(append(base, checks(1, 0)...), takes(11600, 20000)...), []string{"met", "met", "not met", "not measured"}},
		{"no takes, no no-op", checks(1, 0), []string{"not measured", "not measured", "not measured", "not measured"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			goals := lookupGoals(&Results{Lookups: tc.runs})
			for i, g := range goals {
				if g.verdict() != tc.want[i] {
					t.Errorf("goal %q: %s (%s), want %s", g.text, g.verdict(), g.detail, tc.want[i])
				}
			}
		})
	}
}

func TestRenderLookupsRatiosToTheNoopUnderTheSameLoad(t *testing.T) {
	r := &Results{Lookups: []Lookup{
		closedRun(scNoop, 16, 10000, time.Millisecond),
		closedRun(scAllowedOne, 16, 9000, time.Millisecond),
		closedRun(scHTTP, 16, 2000, time.Millisecond),
		{Scenario: scAllowedFour, Cluster: true, Result: rlsload.Result{Concurrency: 16, PerSec: 5000}},
	}}
	var b strings.Builder
	renderLookups(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, r)
	out := b.String()
	for _, want := range []string{
		"| allowed check, one limit (ip 100/m) | c=16 | 9.0k | 0 µs | 1.00 ms | 0 µs | 0.90× |",
		"(not RLS: no ratio) | c=16 | 2.0k | 0 µs | 1.00 ms | 0 µs | — |",
		"on the cluster profile (Redis Cluster 3+3, 3 brokers) | c=16 | 5.0k | 0 µs | 0 µs | 0 µs | 0.50× |",
		"strict takes ≥ 1.5× the old figures: ≥ 11.7k/s at c=16, ≥ 13.95k/s at c=64 (old 7.8k, 9.3k)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func TestRenderLookupCPUSumsTheProcessesOfARun(t *testing.T) {
	take := closedRun(scStrict, 16, 5000, time.Millisecond)
	take.CPU = []ProcCPU{{cpuServer, 100 * time.Microsecond}, {cpuLoad, 60 * time.Microsecond}, {cpuRedis, 90 * time.Microsecond}, {cpuRelay, 10 * time.Microsecond}}
	paced := pacedRun(scStrict, 2000, time.Millisecond)
	paced.CPU = take.CPU // paced runs are not in the table
	r := &Results{Lookups: []Lookup{take, paced, closedRun(scNoop, 16, 10000, time.Millisecond)}}
	var b strings.Builder
	renderLookupCPU(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, r)
	out := b.String()
	want := "| " + lookupLabels[scStrict] + " | c=16 | 100 | 60 | 90 | — | 10 | 260 |"
	if !strings.Contains(out, want) || strings.Count(out, "| strict take") != 1 || strings.Contains(out, "| no-op") {
		t.Errorf("want one row %q, no paced or CPU-less row, in:\n%s", want, out)
	}
}

// The steady-state row compares the live aggregator with the Java tool run
// on the same long topic, not with the 200k-event ceiling of the live row.
func TestRenderLiveSteadyRatiosToItsOwnCeiling(t *testing.T) {
	r := &Results{Events: 200000, Runs: 3, JavaConsume: []float64{200000}, Live: []float64{150000},
		SteadyEvents: 1000000, JavaSteady: []float64{700000, 650000, 600000},
		LiveSteady: liveFigures{Rate: []float64{250000, 260000, 270000}, CPU: []float64{2, 1.8, 2.2}, Cmds: []float64{0.58, 0.6, 0.59}}}
	out := Render(r)
	want := "| aggregator live events/s in steady state (1.00M events per run, alternated with ConsumerPerformance on the same topic: neither's start-up dominates) | 260k | 650k (ConsumerPerformance fetch.nMsg.sec) | 0.40× | ours 250k, 260k, 270k; Java 700k, 650k, 600k; Redis CPU µs per event 2.00, 1.80, 2.20, commands per event 0.5900 |"
	if !strings.Contains(out, want) {
		t.Errorf("missing %q in:\n%s", want, out)
	}
	if strings.Contains(out, "kafka-go alone") {
		t.Errorf("a run without the fetch-only reads renders their rows:\n%s", out)
	}
	r.FetchSteady, r.DecodeSteady = []float64{700000, 720000, 650000}, []float64{500000, 520000, 480000}
	out = Render(r)
	for _, want := range []string{
		"records dropped (what any floodgate consumer could reach) | 700k | 650k (same) | 1.08× | 700k, 720k, 650k |",
		"| the same, each record run through the event decoder | 500k | 650k (same) | 0.77× | 500k, 520k, 480k |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	r.SteadyEvents, r.LiveSteady = 0, liveFigures{}
	if out := Render(r); strings.Contains(out, "steady state") {
		t.Errorf("a run without the step renders its row:\n%s", out)
	}
}

// The steady-state CPU table sums each consumer's processes, and the live
// goal becomes a budget per event: what is left of it once reading,
// decoding and Redis are paid for, against what the live path takes.
func TestRenderSteadyCPUBudgetsTheLiveGoal(t *testing.T) {
	r := &Results{SteadyEvents: 1000000, JavaSteady: []float64{680000, 700000, 720000},
		LiveSteady:  liveFigures{Rate: []float64{300000, 320000, 340000}},
		FetchSteady: []float64{1.1e6}, DecodeSteady: []float64{900000}}
	r.Machine.CPUs = 2
	r.SteadyCPU.Java.add(3, perEvent(300*time.Millisecond, 1000000), 0)
	r.SteadyCPU.Live.add(3.3, 0.4, 1)
	r.SteadyCPU.Fetch.add(1.2, 0.3, 0)
	r.SteadyCPU.Decode.add(1.7, 0.3, 0)
	var b strings.Builder
	renderSteadyCPU(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, r)
	out := b.String()
	for _, want := range []string{
		"| live aggregator (write-back) | 3.30 | 0.40 | 1.00 | 4.70 | 426k/s | 320k/s |",
		"| the Fetcher, each record decoded | 1.70 | 0.30 | 0.00 | 2.00 | 1.00M/s | 900k/s |",
		// 0.85 × 700k = 595k/s: 2 cores ÷ 595k = 3.36 µs; 3.36 − 2.00 − 1.00
		"is 595k events/s: 2 cores ÷ that = 3.36 µs per event for every process together. Reading and decoding with kafka-go, the broker's part included, take 2.00 µs of it, and the aggregator's Redis 1.00 µs: 0.36 µs would be left for the live path's own work (gathering, evaluating, checkpoints, decisions), which takes 1.60 µs today",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	r.SteadyCPU.Live.Redis = []float64{1.5}
	b.Reset()
	renderSteadyCPU(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, r)
	if want := "and the aggregator's Redis 1.50 µs: nothing would be left (0.14 µs short) for"; !strings.Contains(b.String(), want) {
		t.Errorf("missing %q in:\n%s", want, b.String())
	}
	if out := Render(&Results{}); strings.Contains(out, "CPU per event in the steady-state") {
		t.Errorf("a run without the step renders its table")
	}
}

// The take goal of issue 27 sets floodgate's strict takes against
// envoyproxy/ratelimit's hits of the same run, at both concurrencies, and
// is not measured without Envoy's figures.
func TestEnvoyGoalComparesTheTakesOfTheSameRun(t *testing.T) {
	r := &Results{Lookups: []Lookup{
		closedRun(scStrict, 16, 4000, time.Millisecond), closedRun(scStrict, 64, 6000, time.Millisecond),
		closedRun(scEnvoy, 16, 5000, time.Millisecond), closedRun(scEnvoy, 64, 6000, time.Millisecond),
	}}
	g := envoyGoal(r)
	if g.verdict() != "not met" || g.detail != "c=16 strict 4.0k/s against 5.0k/s = 0.80×, c=64 strict 6.0k/s against 6.0k/s = 1.00×" {
		t.Errorf("got %s (%s)", g.verdict(), g.detail)
	}
	r.Lookups[0] = closedRun(scStrict, 16, 5500, time.Millisecond)
	if g := envoyGoal(r); g.verdict() != "met" {
		t.Errorf("takes at or above Envoy at both: got %s (%s)", g.verdict(), g.detail)
	}
	// The owner's takes (stage B), when measured, are the ones judged.
	r.Lookups[0] = closedRun(scStrict, 16, 4000, time.Millisecond)
	r.Lookups = append(r.Lookups, closedRun(scOwnerStrict, 16, 7000, time.Millisecond), closedRun(scOwnerStrict, 64, 9000, time.Millisecond))
	if g := envoyGoal(r); g.verdict() != "met" || !strings.HasPrefix(g.detail, "c=16 strict-owner 7.0k/s against 5.0k/s = 1.40×") {
		t.Errorf("owner takes: got %s (%s)", g.verdict(), g.detail)
	}
	// Envoy's runs after the owner's are averaged with those before; the
	// owner's takes of subjects never seen are told beside, not judged.
	r.Lookups = append(r.Lookups, closedRun(scEnvoyAfter, 16, 9000, time.Millisecond), closedRun(scEnvoyAfter, 64, 6000, time.Millisecond),
		closedRun(scOwnerStrictCold, 16, 3500, time.Millisecond))
	if g := envoyGoal(r); g.verdict() != "met" || !strings.HasPrefix(g.detail, "c=16 strict-owner 7.0k/s against 7.0k/s = 1.00× (subjects never seen: 3.5k/s = 0.50×), c=64") {
		t.Errorf("Envoy before and after: got %s (%s)", g.verdict(), g.detail)
	}
	r.Lookups = r.Lookups[:2]
	if g := envoyGoal(r); g.verdict() != "not measured" {
		t.Errorf("without Envoy's runs: got %s", g.verdict())
	}
}

// A run that waited for the load to settle says so beside the load.
func TestRenderSaysHowLongTheRunWaitedForTheLoad(t *testing.T) {
	r := &Results{LoadStart: "1.20 3.00 2.00", LoadEnd: "2.00 2.00 2.00", Settled: 45 * time.Second}
	r.Machine.CPUs = 2
	if out := Render(r); !strings.Contains(out, "at the start: 1.20 3.00 2.00; at the end: 2.00 2.00 2.00. The run first waited 45s (at most `--settle`) for the 1-minute figure to fall below the cores.") {
		t.Errorf("no wait in:\n%s", out[:min(len(out), 800)])
	}
	r.Settled = 0
	if out := Render(r); strings.Contains(out, "The run waited") {
		t.Errorf("a run that did not wait says it did")
	}
}

func TestOwnerSubjectsAreDistinctAddresses(t *testing.T) {
	set, err := rules.Parse([]byte(ownerRules))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, i := range []int{0, 1, 255, 256, 1 << 16, 1<<24 - 1, 1 << 24, 1<<24 + 1} {
		s := set.Subject("ip", ownerSubject(i))
		if seen[s] {
			t.Fatalf("subject %d (%s) counted as one already seen", i, s)
		}
		seen[s] = true
	}
}

// The summary's long prose lines are wrapped under the docs' line limit;
// table rows and fenced blocks are left whole, and no word is lost.
func TestWrapLongKeepsEveryLineUnderTheLimit(t *testing.T) {
	long := "- live: `" + strings.Repeat("floodgate aggregator --flag ", 80) + "` over the topic"
	table := "| a | " + strings.Repeat("b", 1200) + " |"
	in := "intro\n" + long + "\n" + table + "\n```\n" + strings.Repeat("x ", 600) + "\n```\n"
	out := wrapLong(in, 1000, 160)
	for i, l := range strings.Split(out, "\n") {
		if len(l) > 1000 && l != table && !strings.HasPrefix(l, "x x") {
			t.Errorf("line %d is %d chars", i+1, len(l))
		}
		if strings.HasPrefix(l, "  ") == false && strings.HasPrefix(l, "floodgate") {
			t.Errorf("line %d of the list item is not indented: %q", i+1, l[:20])
		}
	}
	if !strings.Contains(out, table) || !strings.Contains(out, strings.Repeat("x ", 600)) {
		t.Errorf("a table row or a fenced line was wrapped")
	}
	if strings.Join(strings.Fields(out), " ") != strings.Join(strings.Fields(in), " ") {
		t.Errorf("wrapping changed the words")
	}
	r := &Results{}
	r.Machine.CPUs = 2
	for i, l := range strings.Split(Render(r), "\n") {
		if len(l) > 1000 && !strings.HasPrefix(l, "|") {
			t.Errorf("Render line %d is %d chars", i+1, len(l))
		}
	}
}
