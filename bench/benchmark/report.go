package benchmark

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"floodgate/bench/harness"
)

func runs(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = harness.Human(x)
	}
	return strings.Join(parts, ", ")
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// Render returns the summary block of docs/benchmarks.md.
func Render(r *Results) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	m := r.Machine
	w("## Summary (`make bench`)\n\n")
	w("Written by `make bench` (scripts/bench → `floodbench bench`); do not edit this block by hand — the\n")
	w("per-part sections below it are their authors'.\n\n")
	w("Measured %s on %d × %s, %s RAM, Linux %s, %s, commit `%s`, with the local stack (scripts/stack: one\n",
		m.Date.Format("2006-01-02 15:04 UTC"), m.CPUs, m.CPUModel, m.MemTotal, m.Kernel, m.GoVer, m.Commit)
	w("Kafka KRaft broker, Redis and PostgreSQL on loopback, all sharing those cores with floodgate and the load).\n")
	w("Load average (1, 5, 15 min) at the start: %s; at the end: %s.", r.LoadStart, r.LoadEnd)
	if l := firstLoad(r.LoadStart); l > float64(m.CPUs) {
		w(" **The machine was loaded (load > cores) — treat the figures as lower bounds.**")
	}
	w("\n\nThroughput figures are the median of %d runs of %d events each (the runs are listed); each ceiling is\n", r.Runs, r.Events)
	w("Kafka's own Java tool, measured in the same run on the same broker.\n\n")
	w("| what | floodgate | ceiling (same broker, same run) | ratio | runs |\n|---|--:|--:|--:|---|\n")
	w("| producer events/s (`floodgate produce`, acks=all, lz4, linger 5 ms) | %s | %s (ProducerPerformance, %d-byte records) | %s | ours %s; Java %s |\n",
		harness.Human(harness.Median(r.Produce)), harness.Human(harness.Median(r.JavaProduce)), r.RecordSize,
		ratio(harness.Median(r.Produce), harness.Median(r.JavaProduce)), runs(r.Produce), runs(r.JavaProduce))
	w("| aggregator live events/s (Redis) | %s | %s (ConsumerPerformance fetch.nMsg.sec) | %s | ours %s; Java %s |\n",
		harness.Human(harness.Median(r.Live)), harness.Human(harness.Median(r.JavaConsume)),
		ratio(harness.Median(r.Live), harness.Median(r.JavaConsume)), runs(r.Live), runs(r.JavaConsume))
	w("| aggregator history events/s (Postgres) | %s | %s (same) | %s | %s |\n",
		harness.Human(harness.Median(r.History)), harness.Human(harness.Median(r.JavaConsume)),
		ratio(harness.Median(r.History), harness.Median(r.JavaConsume)), runs(r.History))
	for _, l := range r.Lat {
		goal := ""
		switch l.Fraction {
		case 0.1:
			goal = " (goal p99 ≤ 20 ms)"
		case 0.5:
			goal = " (goal p99 ≤ 50 ms)"
		}
		w("| event-to-deny latency p50 / p99 (max) at %.0f%% of the live maximum: %s events/s offered, %s achieved%s | %s / %s (%s) | — | — | %d probes, %d missed |\n",
			100*l.Fraction, harness.Human(l.Rate), harness.Human(l.Achieved), goal, harness.Ms(l.P50), harness.Ms(l.P99), harness.Ms(l.Max), l.N, l.Missed)
	}
	renderLive(w, r)
	w("| Postgres bucket rows/s written (history run) | %s | — | — | %s |\n", harness.Human(harness.Median(r.HistoryRows)), runs(r.HistoryRows))
	if r.RollerErr == "" && r.RollerTook > 0 && r.RollerRows > 0 {
		w("| roller rows/s (`floodgate roller once`) | %s | — | — | %d rows in %s |\n",
			harness.Human(float64(r.RollerRows)/r.RollerTook.Seconds()), r.RollerRows, r.RollerTook)
	} else {
		w("| roller rows/s | not measured | — | — | %s |\n", orNone(r.RollerErr, fmt.Sprintf("nothing due to roll (%d rows in %s)", r.RollerRows, r.RollerTook)))
	}
	if len(r.Curve) > 0 {
		w("| one-year curve query, daily step (`floodgate query curve`, whole process) | %.0f ms | — | — | %s ms |\n", harness.Median(r.Curve), fmtF(r.Curve, "%.0f"))
	} else {
		w("| one-year curve query | not measured | — | — | %s |\n", r.CurveErr)
	}
	renderSketches(w, r)
	w("\nPeak RSS (VmHWM from /proc/PID/status, sampled every 5 ms for the first 2 s, then every 100 ms and just before the process is stopped):\n\n| process | peak RSS |\n|---|--:|\n")
	names := make([]string, 0, len(r.RSS))
	for n := range r.RSS {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w("| %s | %s |\n", n, harness.MiB(r.RSS[n]))
	}
	if r.LimiterTable != "" {
		w("\nLimiter lookups (`floodgate limiter bench`, the limiter engineer's load generator, %s per run):\n\n%s\n", "3s", r.LimiterTable)
	}
	if len(r.Errors) > 0 {
		w("\nSteps that failed in this run:\n\n")
		for _, e := range r.Errors {
			w("- %s\n", e)
		}
	}
	w("\nHow each figure is taken:\n\n")
	w("- producer: wall time of `%s` as it reports it (events acknowledged / time); ceiling: `%s` with --record-size the mean size of our JSON events (read back from the topic). Java's payload is random letters and unkeyed (sticky partitioner); ours is keyed JSON (murmur2).\n", r.ProduceCmd, r.JavaCmd)
	w("- live: a fresh group of `%s` over the first producer topic (pre-filled with %d events); the rate is taken from its first to its last counted message (floodgate_aggregator_messages_in_total), so the group join is excluded, as ConsumerPerformance's fetch.nMsg.sec excludes it: `%s`. After the first run, the same command once with the aggregator built from `%s` (git archive + go build: issue 11's baseline, fixed 50 ms batches, every touched subject re-evaluated, decisions published inline) and once with `%s`.\n",
		r.LiveNow.Cmd, r.Events, r.JavaConsCmd, r.LegacyRev, strings.Join(dedupArgs, " "))
	w("- history: the history group (aggregator.Group + history.Sink, exactly what `floodgate aggregator` wires) run in floodbench's process over the same topic, timed by its stored offsets in floodgate.consumer_offsets; rows/s from floodgate_history_bucket_rows_written_total.\n")
	w("- latency: the live aggregator and a limiter (real processes) under paced background load at each fraction of the live median; each probe publishes 3 events for a fresh subject over a 2/m rule and asks the limiter (HTTP /v1/check, every 2 ms) until it answers 429; time from the Publish call, so it spans Kafka, the aggregator, Redis, the change stream and the limiter's memory.\n")
	w("- Redis: INFO commandstats (all commands but INFO), used_cpu_sys + used_cpu_user and used_memory before and after each live run (only the aggregator talks to that Redis then); subjects are the `@state` hashes under the run's key prefix.\n")
	w("- roller and curve: `%s` after the runs (rows rolled per second as it reports), `%s` ×5 (wall time of the process).\n", r.RollerCmd, r.CurveCmd)
	o := r.SketchOpts
	w("- unique visitors (sketches): history.Sink and roller.Roller in floodbench's process, each run in a database of its own (migrations.CreateDatabase), on %d visits in batches of 10 000 (two minutes each) over %d links drawn from a Zipf law (s = 1.1) and %d visitors drawn uniformly; once without and once with `--visitors bench_visit=ip`. Sink rows/s: bucket rows upserted (floodgate_history_bucket_rows_written_total) per second of Apply calls. Roller: one `RunOnce` a month later on ladder %s, rows moved per second. Bytes per row: heap, TOAST and indexes of the tier's partitions after VACUUM FULL, divided by its rows; sketch bytes: mean stored size of the visitors column (compressed as stored).\n",
		o.SketchEvents, o.SketchKeys, o.SketchVisitors, sketchLadder)
	_ = time.Second
	return b.String()
}

func fmtF(xs []float64, f string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(f, x)
	}
	return strings.Join(parts, ", ")
}

func orNone(s, alt string) string {
	if s != "" {
		return s
	}
	return alt
}

func firstLoad(s string) float64 {
	var f float64
	fmt.Sscanf(s, "%f", &f)
	return f
}

// renderSketches writes the rows of the sketches step (without, then with
// unique-visitor sketches) into the summary table.
func renderSketches(w func(string, ...any), r *Results) {
	if len(r.Sketches) != 2 {
		return
	}
	off, on := r.Sketches[0], r.Sketches[1]
	rate := func(rows int64, took time.Duration) float64 {
		if took <= 0 {
			return 0
		}
		return float64(rows) / took.Seconds()
	}
	w("\nUnique visitors in history (sketches step, in process; without → with `--visitors`):\n\n")
	w("| what | without | with visitors | with / without | detail |\n|---|--:|--:|--:|---|\n")
	sinkOff, sinkOn := rate(off.SinkRows, off.SinkTook), rate(on.SinkRows, on.SinkTook)
	w("| history sink bucket rows/s | %s | %s | %s | %d rows in %s; %d rows in %s |\n", harness.Human(sinkOff), harness.Human(sinkOn),
		ratio(sinkOn, sinkOff), off.SinkRows, off.SinkTook.Round(time.Millisecond), on.SinkRows, on.SinkTook.Round(time.Millisecond))
	rollOff, rollOn := rate(off.RollRows, off.RollTook), rate(on.RollRows, on.RollTook)
	w("| roller rows/s (1m → 5m → 1h) | %s | %s | %s | %d rows in %s; %d rows in %s |\n", harness.Human(rollOff), harness.Human(rollOn),
		ratio(rollOn, rollOff), off.RollRows, off.RollTook.Round(time.Millisecond), on.RollRows, on.RollTook.Round(time.Millisecond))
	for i := range min(len(off.Tiers), len(on.Tiers)) {
		a, b := off.Tiers[i], on.Tiers[i]
		w("| bytes per %s bucket row (heap + TOAST + indexes) | %.0f | %.0f | %s | %d rows; with visitors: sketch %.0f bytes on average, %.1f%% of rows dense (> 256 visitors) |\n",
			a.Step, a.RowBytes, b.RowBytes, ratio(b.RowBytes, a.RowBytes), b.Rows, b.SketchBytes, 100*b.Dense)
	}
}

// renderLive writes the live rows: the current settings against the
// Java consumer, then what Redis pays per event now, before (the legacy
// settings), and with dedup.
func renderLive(w func(string, ...any), r *Results) {
	now, old, dd := r.LiveNow, r.LiveLegacy, r.LiveDedup
	med := harness.Median
	w("| aggregator live events/s, legacy aggregator (%s) | %s | %s | %s | %s |\n", orNone(r.LegacyRev, "not built"),
		harness.Human(med(old.Rate)), harness.Human(med(r.JavaConsume)), ratio(med(old.Rate), med(r.JavaConsume)), runs(old.Rate))
	w("| aggregator live events/s with `%s` | %s | %s | %s | %s |\n", strings.Join(dedupArgs, " "),
		harness.Human(med(dd.Rate)), harness.Human(med(r.JavaConsume)), ratio(med(dd.Rate), med(r.JavaConsume)), runs(dd.Rate))
	w("| Redis commands per event (script-internal included): now / legacy / dedup | %.4f / %.4f / %.4f | — | legacy ÷ now %s | now %s; legacy %s; dedup %s |\n",
		med(now.Cmds), med(old.Cmds), med(dd.Cmds), ratio(med(old.Cmds), med(now.Cmds)), fmtF(now.Cmds, "%.4f"), fmtF(old.Cmds, "%.4f"), fmtF(dd.Cmds, "%.4f"))
	w("| Redis CPU µs per event (used_cpu_user + sys): now / legacy / dedup (goal: legacy ÷ now ≥ 2) | %.2f / %.2f / %.2f | — | legacy ÷ now %s | now %s; legacy %s; dedup %s |\n",
		med(now.CPU), med(old.CPU), med(dd.CPU), ratio(med(old.CPU), med(now.CPU)), fmtF(now.CPU, "%.2f"), fmtF(old.CPU, "%.2f"), fmtF(dd.CPU, "%.2f"))
	w("| Redis bytes per active subject (used_memory delta / subjects), now / dedup | %s / %s | — | — | now %s; dedup %s; subjects %v |\n",
		harness.Human(med(now.Bytes)), harness.Human(med(dd.Bytes)), runs(now.Bytes), runs(dd.Bytes), now.Subjects)
}
