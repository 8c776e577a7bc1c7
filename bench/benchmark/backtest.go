package benchmark

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
)

// backtestFigures are the backtest runs of one setting.
type backtestFigures struct {
	Rate     []float64 // events/s as the backtest reports it
	PeakMiB  []float64 // its private redis-servers' peak memory
	Cmd      string
	Topic    string
	Messages int
}

// benchBaseline is the bench rules with tighter limits: the rules set a
// backtest with --baseline replays beside them.
const benchBaseline = `# make bench baseline rules (generated): bench-rules.yaml, tightened.
rules:
  - name: bench-visit
    action: bench_visit
    kinds: [ip]
    limits: [30/s, 400/m, 10000/h]
    shadow: true
  - name: bench-login
    action: bench_login
    kinds: [ip]
    limits: [3/s, 8/m, 20/h, 200/d]
`

var (
	reBacktestRate = regexp.MustCompile(`events replayed in [\d.]+ s: ([\d,]+) events/s`)
	reBacktestPeak = regexp.MustCompile(`replay redis peak ([\d.]+) MiB`)
)

// backtest: `floodgate backtest` of the bench rules over the whole
// pre-filled topic, Runs times, then once with --baseline (two rules sets
// replayed at once); events/s as the backtest reports it, from its first
// fetch to its last apply (its redis-servers' start and the planning
// excluded, as ConsumerPerformance's fetch.nMsg.sec excludes the group
// join), against ConsumerPerformance on the same topic in the same run. On
// its own (--only backtest) it produces its topic and measures the ceiling
// itself.
func (b *bench) backtest(ctx context.Context) error {
	if len(b.topics) == 0 {
		if err := b.produceOnce(ctx); err != nil {
			return err
		}
	}
	if len(b.res.JavaConsume) == 0 {
		if err := b.javaConsumer(ctx); err != nil {
			return err
		}
	}
	baseline := filepath.Join(b.cfg.WorkDir, "bench-baseline.yaml")
	if err := os.WriteFile(baseline, []byte(benchBaseline), 0o644); err != nil {
		return err
	}
	for i := 0; i < b.cfg.Runs; i++ {
		if err := b.backtestRun(ctx, fmt.Sprintf("backtest-%d", i), nil, &b.res.Backtest); err != nil {
			return err
		}
	}
	return b.backtestRun(ctx, "backtest-baseline", []string{"--baseline", baseline}, &b.res.BacktestBase)
}

func (b *bench) backtestRun(ctx context.Context, name string, extra []string, into *backtestFigures) error {
	// The topic was produced in this run: six hours back covers it whole.
	args := append([]string{"backtest", "--brokers", strings.Join(b.cfg.Brokers, ","), "--topic", b.topics[0],
		"--rules", b.rules, "--from", "6h", "--to", "now", "--progress", "0", "--top", "1"}, extra...)
	into.Cmd, into.Topic, into.Messages = "floodgate "+strings.Join(args, " "), b.topics[0], b.cfg.Events
	p, err := childproc.Run(ctx, childproc.Config{Name: name, Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
	b.peak("floodgate backtest", p)
	if err != nil {
		return err
	}
	// The log is appended to: this run's report is its last.
	out := strings.Join(splitLog(p.LogPath), "\n")
	m := last(reBacktestRate.FindAllStringSubmatch(out, -1))
	if m == nil {
		return fmt.Errorf("%s: no events/s in its report: %s", name, childproc.TailFile(p.LogPath, 5))
	}
	rate, _ := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
	into.Rate = append(into.Rate, rate)
	if m := last(reBacktestPeak.FindAllStringSubmatch(out, -1)); m != nil {
		mib, _ := strconv.ParseFloat(m[1], 64)
		into.PeakMiB = append(into.PeakMiB, mib)
	}
	return nil
}

func last(ms [][]string) []string {
	if len(ms) == 0 {
		return nil
	}
	return ms[len(ms)-1]
}

// produceOnce fills one topic as the producer step's first run does.
func (b *bench) produceOnce(ctx context.Context) error {
	t, err := b.topic("p0")
	if err != nil {
		return err
	}
	args := b.produceArgs(b.cfg.Brokers, t, b.cfg.Events, 1)
	p, err := childproc.Run(ctx, childproc.Config{Name: "produce-backtest", Bin: b.cfg.Bin, Args: args, LogDir: b.cfg.WorkDir})
	b.peak("floodgate produce", p)
	return err
}

// renderBacktest writes the backtest rows of the summary table.
func renderBacktest(w func(string, ...any), r *Results) {
	if len(r.Backtest.Rate) == 0 {
		return
	}
	java := harness.Median(r.JavaConsume)
	w("| backtest events/s (`floodgate backtest`, the live path's scripts on a private redis-server; goal ≥ 0.5× the ceiling) | %s | %s (ConsumerPerformance fetch.nMsg.sec) | %s | ours %s; Java %s; replay Redis peak %s MiB |\n",
		harness.Human(harness.Median(r.Backtest.Rate)), harness.Human(java), ratio(harness.Median(r.Backtest.Rate), java),
		runs(r.Backtest.Rate), runs(r.JavaConsume), fmtF(r.Backtest.PeakMiB, "%.1f"))
	if len(r.BacktestBase.Rate) > 0 {
		w("| backtest events/s with `--baseline` (two rules sets replayed at once) | %s | %s (same) | %s | %s |\n",
			harness.Human(harness.Median(r.BacktestBase.Rate)), harness.Human(java), ratio(harness.Median(r.BacktestBase.Rate), java), runs(r.BacktestBase.Rate))
	}
}

// backtestHow says how the backtest figures are taken.
func backtestHow(w func(string, ...any), r *Results) {
	if len(r.Backtest.Rate) == 0 {
		return
	}
	w("- backtest: `%s` over the first producer topic (%d events, read whole), then once with `--baseline` (the bench rules tightened); events/s as it reports them: events replayed over the time from its first fetch to its last apply (starting its redis-servers and finding the offsets excluded, as ConsumerPerformance's fetch.nMsg.sec excludes the group join); ceiling: ConsumerPerformance on the same topic, as in the live row.\n",
		r.Backtest.Cmd, r.Backtest.Messages)
}
