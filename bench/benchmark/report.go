package benchmark

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/bench/rlsload"
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
	return wrapLong(render(r), maxDocLine, 160)
}

// maxDocLine is the longest line the summary may hold: the docs keep every
// line under 1,000 characters so that diffs and reviews stay readable.
const maxDocLine = 1000

// wrapLong breaks each prose line (a paragraph or list item, not a table
// row or a fenced block) longer than limit at spaces into lines of about
// width characters; Markdown renders the continuation lines as the same
// paragraph (a line break inside a code span is a space, and breaks fall on
// spaces).
func wrapLong(s string, limit, width int) string {
	lines := strings.Split(s, "\n")
	out := make([]string, 0, len(lines))
	fenced := false
	for _, l := range lines {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if fenced || len(l) <= limit || strings.HasPrefix(l, "|") {
			out = append(out, l)
			continue
		}
		indent := ""
		if strings.HasPrefix(l, "- ") {
			indent = "  "
		}
		cur := ""
		for _, word := range strings.Split(l, " ") {
			if cur != "" && len(cur)+1+len(word) > width {
				out = append(out, cur)
				cur = indent + word
				continue
			}
			if cur == "" {
				cur = word
			} else {
				cur += " " + word
			}
		}
		out = append(out, cur)
	}
	return strings.Join(out, "\n")
}

// render is the summary before its long lines are wrapped.
func render(r *Results) string {
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
	if r.Settled > 0 {
		w(" The run first waited %s (at most `--settle`) for the 1-minute figure to fall below the cores.", r.Settled)
	}
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
	if st := r.LiveSteady; len(st.Rate) > 0 {
		w("| aggregator live events/s in steady state (%s events per run, alternated with ConsumerPerformance on the same topic: neither's start-up dominates) | %s | %s (ConsumerPerformance fetch.nMsg.sec) | %s | ours %s; Java %s; Redis CPU µs per event %s, commands per event %.4f |\n",
			harness.Human(float64(r.SteadyEvents)), harness.Human(harness.Median(st.Rate)), harness.Human(harness.Median(r.JavaSteady)),
			ratio(harness.Median(st.Rate), harness.Median(r.JavaSteady)), runs(st.Rate), runs(r.JavaSteady), fmtF(st.CPU, "%.2f"), harness.Median(st.Cmds))
		for _, v := range []struct {
			what  string
			rates []float64
		}{
			{"kafka-go alone in steady state: the aggregator's Fetcher on every partition at once, records dropped (what any floodgate consumer could reach)", r.FetchSteady},
			{"the same, each record run through the event decoder", r.DecodeSteady},
		} {
			if len(v.rates) > 0 {
				w("| %s | %s | %s (same) | %s | %s |\n", v.what, harness.Human(harness.Median(v.rates)), harness.Human(harness.Median(r.JavaSteady)),
					ratio(harness.Median(v.rates), harness.Median(r.JavaSteady)), runs(v.rates))
			}
		}
	}
	w("| aggregator history events/s (Postgres) | %s | %s (same) | %s | %s |\n",
		harness.Human(harness.Median(r.History)), harness.Human(harness.Median(r.JavaConsume)),
		ratio(harness.Median(r.History), harness.Median(r.JavaConsume)), runs(r.History))
	if hd := r.HistoryDedup; hd.With.Rate > 0 {
		w("| aggregator history events/s with `%s` | %s | %s (same) | %s | without %s, with %s (with ÷ without %s), each once in a fresh database; history_ids %.0f bytes per event |\n",
			strings.Join(dedupArgs, " "), harness.Human(hd.With.Rate), harness.Human(harness.Median(r.JavaConsume)),
			ratio(hd.With.Rate, harness.Median(r.JavaConsume)), harness.Human(hd.Without.Rate), harness.Human(hd.With.Rate),
			ratio(hd.With.Rate, hd.Without.Rate), hd.With.IDBytes)
	}
	renderBacktest(w, r)
	for _, l := range r.Lat {
		kafka, over := "—", "—"
		if l.KafkaN > 0 {
			kafka = fmt.Sprintf("%s / %s (%s) Kafka produce→consume", harness.Ms(l.KafkaP50), harness.Ms(l.KafkaP99), harness.Ms(l.KafkaMax))
			if l.DecidedN > 0 {
				kafka += fmt.Sprintf("; deny written in Redis %s / %s", harness.Ms(l.DecidedP50), harness.Ms(l.DecidedP99))
			}
			if d := l.P99 - l.KafkaP99; d >= 0 {
				over = "p99 " + harness.Ms(d) + " over Kafka's"
			} else {
				over = "p99 " + harness.Ms(-d) + " under Kafka's"
			}
		}
		w("| event-to-deny latency p50 / p99 (max) at %.0f%% of the end-to-end maximum (%s events/s: producer, broker, aggregator and limiter together): %s events/s offered, %s achieved; goal p99 ≤ Kafka's + 25 ms | %s / %s (%s) | %s | %s | %d probes, %d missed; Kafka's figure from %d of them |\n",
			100*l.Fraction, harness.Human(r.LatE2EMax), harness.Human(l.Rate), harness.Human(l.Achieved), harness.Ms(l.P50), harness.Ms(l.P99), harness.Ms(l.Max), kafka, over, l.N, l.Missed, l.KafkaN)
	}
	renderLive(w, r)
	if o := r.Owner; o != nil {
		w("| write-back owner's RSS per resident subject, %s subjects streamed (goal ≤ 150 B) | %.0f B | — | — | peak %.0f B; heap %.0f B, outside the heap %.0f B (mapped); %d resident, %d bucket copies |\n",
			harness.Human(float64(o.Subjects)), o.RSS, o.Peak, o.Heap, o.OffHeap, o.Resident, o.Copies)
	}
	renderCluster(w, r)
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
	renderSteadyCPU(w, r)
	renderScale(w, r)
	w("\nPeak RSS (VmHWM from /proc/PID/status, sampled every 5 ms for the first 2 s, then every 100 ms and just before the process is stopped):\n\n| process | peak RSS |\n|---|--:|\n")
	names := make([]string, 0, len(r.RSS))
	for n := range r.RSS {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w("| %s | %s |\n", n, harness.MiB(r.RSS[n]))
	}
	renderLookups(w, r)
	renderSecure(w, r)
	if len(r.Errors) > 0 {
		w("\nSteps that failed in this run:\n\n")
		for _, e := range r.Errors {
			w("- %s\n", e)
		}
	}
	w("\nHow each figure is taken:\n\n")
	w("- producer: wall time of `%s` as it reports it (events acknowledged / time); ceiling: `%s` with --record-size the mean size of our JSON events (read back from the topic). Java's payload is random letters and unkeyed (sticky partitioner); ours is keyed JSON (murmur2).\n", r.ProduceCmd, r.JavaCmd)
	if o := r.Owner; o != nil {
		w("- owner-memory: `%s` in a process of its own: one partition, one event each for %d distinct subjects through the live path's write-back Applier and Headroom, checkpointed as the sink does; RSS is the process's growth once the Go heap's free pages are returned (debug.FreeOSMemory), peak its VmHWM growth, both divided by the subjects resident (the Headroom's bound).\n", o.Cmd, o.Subjects)
	}
	w("- live: a fresh group of `%s` over the first producer topic (pre-filled with %d events); the rate is taken from its first to its last counted message (floodgate_aggregator_messages_in_total), so the group join is excluded, as ConsumerPerformance's fetch.nMsg.sec excludes it: `%s`. After the first run, the same command once with the aggregator built from `%s` (git archive + go build: issue 11's baseline, fixed 50 ms batches, every touched subject re-evaluated, decisions published inline) and once with `%s`.\n",
		r.LiveNow.Cmd, r.Events, r.JavaConsCmd, r.LegacyRev, strings.Join(dedupArgs, " "))
	if r.SteadyEvents > 0 {
		w("- live in steady state: a topic of %d events of the same mix (`floodgate produce --count %d`), then %d times ConsumerPerformance over all of it in a fresh group and the live command above over it in a fresh group and key prefix, alternated. Each is timed over its steady window, from a quarter of the events to the last (the JVM warm and the group joined; a fresh group's first loads of subjects' copies behind): ConsumerPerformance from its progress lines (--show-detailed-stats, every 200 ms), the aggregator from its counter, with its CPU and Redis's read at the window's two ends (%d events a run of the other rows would be mostly start-up). After each pair, floodbench reads the topic with consume.Fetcher (fetch requests through kafka-go's transport, batches decoded by floodgate, every partition at once, 1 MiB fetches), once dropping the records and once decoding each with event.Decode; the rate runs from the first fetch to the last record.\n",
			r.SteadyEvents, r.SteadyEvents, max(r.SteadyRuns, 1), r.Events)
	}
	w("- history: the history group (consume.Group + history.Sink, exactly what `floodgate aggregator` wires) run in floodbench's process over the same topic, timed by its stored offsets in floodgate.consumer_offsets; rows/s from floodgate_history_bucket_rows_written_total. The dedup row: once, after the runs, the same group without and then with `SinkConfig.Dedup` = %s (what `%s` sets), each in a database of its own (migrations.CreateDatabase), so that both start from empty tables; the topic's ids are all distinct, so it is the price of checking and recording every id; bytes per event: pg_total_relation_size of history_ids (heap and both indexes) after the run, divided by the events.\n",
		historyDedup, strings.Join(dedupArgs, " "))
	backtestHow(w, r)
	w("- latency: the live aggregator and a limiter (real processes) under paced background load at each fraction of the live median; each probe publishes 3 events for a fresh subject over a 2/m rule and asks the limiter (HTTP /v1/check, every 2 ms) until it answers 429; time from the Publish call, so it spans Kafka, the aggregator, Redis, the change stream and the limiter's memory.\n")
	w("- Redis: INFO commandstats (all commands but INFO), used_cpu_sys + used_cpu_user and used_memory before and after each live run (only the aggregator talks to that Redis then); subjects are the `@state` hashes under the run's key prefix.\n")
	w("- roller and curve: `%s` after the runs (rows rolled per second as it reports), `%s` ×5 (wall time of the process).\n", r.RollerCmd, r.CurveCmd)
	if len(r.Lookups) > 0 {
		w("- limiter lookups: the load generator (bench/rlsload, in floodbench's process) sends Envoy RLS v3 `ShouldRateLimit` calls over %d HTTP/2 connections (Envoy keeps one per worker thread), a random subject of %d per scenario each time; closed loop: c callers each calling again once answered, lookups/s over the measured %s after a warm-up of a fifth of it (at most 1 s); paced: calls scheduled at a fixed rate whatever the answers, each latency from its scheduled time (no coordinated omission), lookups/s up to the last answer; latencies in an HDR histogram (1 µs–1 min, 3 digits). Processes: `%s`. Denied subjects get %d events each through live.Applier.Apply (the aggregator's write) before the runs, which start once every one answers OVER_LIMIT; strict takes use `--rls-mode take`, which counts each admitted take in Redis and queues its event there, and a live aggregator of the limiter's topic runs beside it, whose take relay publishes the queued events to Kafka (its CPU is the `aggregator` column). Unexpected answers: another code than the scenario's; those marked failed closed are the limiter's own count (`floodgate_limiter_failure_mode_total{mode=\"closed\"}`) of answers Redis did not give within `--redis-timeout` (50 ms), which a strict take always denies — under load the take's wait for its slot's script run; that count covers the load generator's warm-up too, so it can exceed the unexpected answers. envoyproxy/ratelimit (`go install %s`, into the work directory) runs on the strict take's requests, with a redis-server of its own (its `Redis` column) and the rule domain bench_strict, key email, 10⁹ per minute, just before `aggregator --owner-takes` starts and again just after it stops (never beside it), and the take goal compares the owner with the mean of the two; in a run without it, the steps that failed say why. The owner's takes are measured twice: of subjects it has never seen (the `cold` rows: each take's subject loaded from Redis first, under its partition's lock), then, after asking every subject of the goal's set once, of subjects it holds. Rules: %s\n",
			runtime.NumCPU(), lookupSubjects, r.SketchOpts.LimiterD, strings.Join(r.LookupCmds, "`, `"), deniedEvents, envoyRatelimit, strings.ReplaceAll(strings.TrimSpace(lookupRulesSummary), "\n", " "))
	}
	if r.Cluster.Skipped == "" && len(r.Cluster.One) > 0 {
		w("- cluster: per run, a fresh topic (replication factor %d, min.insync.replicas=%s, %d partitions); two processes of `%s` (one group, each its own metrics address; `%s` so that paused members keep their partitions) join the group on the empty topic and are paused (SIGSTOP) while `%s` fills it, then continued together: no member joins late and the producer does not set the pace. Then one such process alone (without `%s`) on the same, now full, topic in a fresh group. Rate: summed floodgate_aggregator_messages_in_total from the first sample at which every process had counted a message to the last message (the group join left out, as in the live step).\n",
			clusterRF, clusterMinISR, r.SketchOpts.PartCount, r.Cluster.LiveCmd, strings.Join(pausedArgs, " "), r.Cluster.ProduceCmd, strings.Join(pausedArgs, " "))
	}
	o := r.SketchOpts
	w("- unique visitors (sketches): history.Sink and retention.Roller in floodbench's process, each run in a database of its own (migrations.CreateDatabase), on %d visits in batches of 10 000 (two minutes each) over %d links drawn from a Zipf law (s = 1.1) and %d visitors drawn uniformly; once without and once with `--visitors bench_visit=ip`. Sink rows/s: bucket rows upserted (floodgate_history_bucket_rows_written_total) per second of Apply calls. Roller: one `RunOnce` a month later on ladder %s, rows moved per second. Bytes per row: heap, TOAST and indexes of the tier's partitions after VACUUM FULL, divided by its rows; sketch bytes: mean stored size of the visitors column (compressed as stored).\n",
		o.SketchEvents, o.SketchKeys, o.SketchVisitors, sketchLadder)
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
	now, old, dd, wt := r.LiveNow, r.LiveLegacy, r.LiveDedup, r.LiveThrough
	med := harness.Median
	w("| aggregator live events/s, write-through (`%s`, alternated with the write-back runs) | %s | %s | %s | %s; write-back ÷ write-through %s |\n", strings.Join(throughArgs, " "),
		harness.Human(med(wt.Rate)), harness.Human(med(r.JavaConsume)), ratio(med(wt.Rate), med(r.JavaConsume)), runs(wt.Rate), ratio(med(now.Rate), med(wt.Rate)))
	w("| Redis CPU µs per event, write-back / write-through (goal ≤ 1.0 write-back) | %.2f / %.2f | — | write-through ÷ write-back %s | write-back %s; write-through %s; commands per event %.4f / %.4f |\n",
		med(now.CPU), med(wt.CPU), ratio(med(wt.CPU), med(now.CPU)), fmtF(now.CPU, "%.2f"), fmtF(wt.CPU, "%.2f"), med(now.Cmds), med(wt.Cmds))
	if c, ct := r.LiveCold, r.LiveColdThrough; len(c.Rate) > 0 {
		w("| cold subjects (%s drawn uniformly): aggregator live events/s, write-back / write-through | %s / %s | %s | %s / %s | once each |\n",
			harness.Human(float64(r.ColdSubjects)), harness.Human(med(c.Rate)), harness.Human(med(ct.Rate)), harness.Human(med(r.JavaConsume)),
			ratio(med(c.Rate), med(r.JavaConsume)), ratio(med(ct.Rate), med(r.JavaConsume)))
		w("| cold subjects: Redis CPU µs per event, write-back / write-through | %.2f / %.2f | — | write-through ÷ write-back %s | commands per event %.4f / %.4f; Redis bytes per subject %s / %s |\n",
			med(c.CPU), med(ct.CPU), ratio(med(ct.CPU), med(c.CPU)), med(c.Cmds), med(ct.Cmds), harness.Human(med(c.Bytes)), harness.Human(med(ct.Bytes)))
	}
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

// renderCluster writes the cluster step's rows into the summary table,
// beside the single-node ones.
func renderCluster(w func(string, ...any), r *Results) {
	c := r.Cluster
	med := harness.Median
	switch {
	case c.Skipped != "":
		w("| cluster profile (3 brokers, Redis Cluster 3+3) | not measured | — | — | %s |\n", c.Skipped)
		return
	case len(c.One) == 0 && len(c.Produce) == 0:
		return
	}
	w("| producer events/s on the cluster profile (3 brokers, replication factor %d, acks=all) | %s | — | — | %s |\n",
		clusterRF, harness.Human(med(c.Produce)), runs(c.Produce))
	w("| aggregator live events/s on the cluster profile (Redis Cluster 3+3), one process | %s | — | — | %s |\n",
		harness.Human(med(c.One)), runs(c.One))
	w("| aggregator live events/s on the cluster profile, two processes in one group | %s | — | two ÷ one %s | %s |\n",
		harness.Human(med(c.Two)), ratio(med(c.Two), med(c.One)), runs(c.Two))
}

// lookupLabels name the limiter step's scenarios in the table.
var lookupLabels = map[string]string{
	scNoop:            "no-op RLS server (`floodbench rls-noop`: the ceiling)",
	scAllowedOne:      "allowed check, one limit (ip 100/m)",
	scAllowedFour:     "allowed check, four limits on ip + email (2/s, 5/m, 10/h, 100/d)",
	scDenied:          "denied check (ip over 10/h)",
	scStrict:          "strict take (`--rls-mode take`: counted in Redis, its event relayed to Kafka by the aggregator)",
	scStrictTwo:       "strict take of an IP and an e-mail (two slots: reserved in each in turn, each slot's event queued with its count)",
	scHTTP:            "allowed check, four limits, HTTP `GET /v1/check` (not RLS: no ratio)",
	scOwnerStrict:     "strict take answered by the partition owner (`aggregator --owner-takes`: summed from its memory, its event appended to the take stream before the answer, relayed and counted by the same process)",
	scOwnerStrictTwo:  "strict take of an IP and an e-mail answered by two owners (`aggregator --owner-takes` ×2, each owning about half the partitions, every take sent to the first: answered there, forwarded to the second, or, when the two own its subjects apart, reserved at both and committed; the second's CPU is the aggregator column)",
	scOwnerStrictCold: "strict take answered by the partition owner, of subjects it has never seen (each first loaded from Redis: a login or a password reset's usual subject)",
	scEnvoy:           "envoyproxy/ratelimit on the strict take's requests (its own redis-server; one `INCRBY` and `EXPIRE` per hit, fixed windows), just before the owner's takes: the take goal's reference",
	scEnvoyAfter:      "envoyproxy/ratelimit again, just after the owner's takes",
}

// lookupRulesSummary is what the rules of the limiter step say, for the
// "how" notes.
const lookupRulesSummary = `bench_one: ip 100/m; bench_four: ip and email 2/s, 5/m, 10/h, 100/d;
bench_strict: email 10⁹/m, 10⁹/h, strict (never reached: every take admits and counts); bench_strict2: the same on ip and email.`

// ceilingOf returns the no-op run under the same load as l: the same
// concurrency, or a paced run at the same rate.
func ceilingOf(r *Results, l Lookup) (Lookup, bool) {
	for _, n := range r.Lookups {
		if n.Scenario != scNoop || n.Paced() != l.Paced() {
			continue
		}
		if (l.Paced() && n.Rate == l.Rate) || (!l.Paced() && n.Concurrency == l.Concurrency) {
			return n, true
		}
	}
	return Lookup{}, false
}

// findLookup returns the single-node run of a scenario at concurrency c,
// or its paced run when c is 0.
func findLookup(r *Results, scenario string, c int) (Lookup, bool) {
	for _, l := range r.Lookups {
		if l.Scenario == scenario && !l.Cluster && l.Concurrency == c && l.Paced() == (c == 0) {
			return l, true
		}
	}
	return Lookup{}, false
}

// renderLookups writes the limiter step's table (and the cluster step's
// lookups) and the goals, met or not, in the same run.
func renderLookups(w func(string, ...any), r *Results) {
	if len(r.Lookups) == 0 {
		return
	}
	w("\nLimiter lookups over Envoy RLS v3 against `floodgate limiter` processes, each next to the no-op RLS server under the same load in the same run (same gRPC stack, answers OK without work); %s measured per run:\n\n", r.SketchOpts.LimiterD)
	w("| scenario | load | lookups/s | p50 | p99 | p99.9 | × no-op | unexpected / errors |\n|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, l := range r.Lookups {
		label := lookupLabels[l.Scenario]
		if l.Cluster {
			label += ", on the cluster profile (Redis Cluster 3+3, 3 brokers)"
		}
		if l.Routes != "" {
			label += "; " + l.Routes
		}
		x := "—"
		if n, ok := ceilingOf(r, l); ok && l.Scenario != scHTTP {
			x = ratio(l.PerSec, n.PerSec)
		}
		unexpected := fmt.Sprint(l.Unexpected)
		if l.FailedClosed > 0 {
			unexpected += fmt.Sprintf(" (%d failed closed)", l.FailedClosed)
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s / %d |\n", label, l.Load(), harness.Human(l.PerSec),
			rlsload.Latency(l.P50), rlsload.Latency(l.P99), rlsload.Latency(l.P999), x, unexpected, l.Errors)
	}
	renderLookupCPU(w, r)
	if !slices.ContainsFunc(r.Lookups, func(l Lookup) bool { return !l.Cluster && l.Scenario != scNoop }) {
		return // the cluster step alone: no goal is about it
	}
	w("\nGoals (issues 10 and 27), judged on the figures above:\n\n")
	for _, g := range lookupGoals(r) {
		if g.detail == "" {
			w("- %s: **%s**\n", g.text, g.verdict())
			continue
		}
		w("- %s: **%s** (%s)\n", g.text, g.verdict(), g.detail)
	}
}

// renderLookupCPU writes where a lookup's CPU goes, at c=16 and c=64: per
// process, and the most lookups a second the machine's cores could answer
// if every process kept them all busy.
func renderLookupCPU(w func(string, ...any), r *Results) {
	var rows []Lookup
	for _, l := range r.Lookups {
		if len(l.CPU) > 0 && (l.Concurrency == 16 || l.Concurrency == 64) {
			rows = append(rows, l)
		}
	}
	if len(rows) == 0 {
		return
	}
	cores := runtime.NumCPU()
	w("\nCPU per lookup, µs, in the closed-loop runs above: each process's CPU time over the run (warm-up included; /proc/PID/stat, Redis INFO cpu) ÷ (lookups/s × the run's wall time); the server is the no-op or the limiter, the load generator is floodbench; %d cores ÷ the sum is what this machine could answer at best:\n\n", cores)
	w("| scenario | load | %s | sum | %d cores ÷ sum |\n|---|---|%s--:|--:|\n", strings.Join(cpuColumns, " | "), cores, strings.Repeat("--:|", len(cpuColumns)))
	for _, l := range rows {
		var sum time.Duration
		cells := make([]string, len(cpuColumns))
		for i, name := range cpuColumns {
			cells[i] = "—"
			for _, c := range l.CPU {
				if c.Name == name {
					cells[i] = fmt.Sprintf("%.0f", float64(c.PerOp)/float64(time.Microsecond))
					sum += c.PerOp
				}
			}
		}
		ceiling := "—"
		if sum > 0 {
			ceiling = harness.Human(float64(cores) * float64(time.Second) / float64(sum))
		}
		w("| %s | %s | %s | %.0f | %s/s |\n", lookupLabels[l.Scenario], l.Load(), strings.Join(cells, " | "), float64(sum)/float64(time.Microsecond), ceiling)
	}
}

// goal is one of the limiter's goals, judged on one run's figures.
type goal struct {
	text     string
	measured bool // every figure it needs was measured
	met      bool
	detail   string
}

func (g goal) verdict() string {
	switch {
	case !g.measured:
		return "not measured"
	case g.met:
		return "met"
	}
	return "not met"
}

// The goals' thresholds.
const (
	goalRatio    = 0.8                 // allowed checks ÷ the no-op, at c=16 and c=64
	goalP99Extra = time.Millisecond    // checks' p99 over the no-op's
	goalTakeGain = 1.5                 // strict takes ÷ the old figures
	oldTakeC16   = 7800.0              // strict takes/s at c=16 before (issue 10)
	oldTakeC64   = 9300.0              // and at c=64
	goalLoadNote = "c=16, c=64, paced" // the loads the p99 goal is judged at
)

// lookupGoals judges the goals of issue 10: allowed checks ≥ 0.8× the
// no-op at c=16 and c=64 (one limit and four limits); every check's p99
// (allowed and denied) no worse than the no-op's + 1 ms at c=16, c=64 and
// paced; strict takes ≥ 1.5× the old 7.8k/s (c=16) and 9.3k/s (c=64).
func lookupGoals(r *Results) []goal {
	loads := []int{16, 64}
	ratioGoal := goal{text: fmt.Sprintf("allowed checks ≥ %.1f× the no-op at c=16 and c=64, one limit and four limits", goalRatio), measured: true, met: true}
	var parts []string
	for _, sc := range []string{scAllowedOne, scAllowedFour} {
		for _, c := range loads {
			l, ok := findLookup(r, sc, c)
			n, nok := ceilingOf(r, l)
			if !ok || !nok || n.PerSec == 0 {
				ratioGoal.measured = false
				continue
			}
			x := l.PerSec / n.PerSec
			ratioGoal.met = ratioGoal.met && x >= goalRatio
			parts = append(parts, fmt.Sprintf("%s c=%d %.2f×", shortLabel(sc), c, x))
		}
	}
	ratioGoal.detail = strings.Join(parts, ", ")

	p99Goal := goal{text: "checks' p99 (allowed and denied) ≤ the no-op's p99 + 1 ms, at " + goalLoadNote, measured: true, met: true}
	parts = nil
	for _, sc := range []string{scAllowedOne, scAllowedFour, scDenied} {
		for _, c := range []int{16, 64, 0} {
			l, ok := findLookup(r, sc, c)
			n, nok := ceilingOf(r, l)
			if !ok || !nok {
				p99Goal.measured = false
				continue
			}
			over := l.P99 - n.P99
			p99Goal.met = p99Goal.met && over <= goalP99Extra
			parts = append(parts, fmt.Sprintf("%s %s %+.2f ms", shortLabel(sc), l.Load(), float64(over)/float64(time.Millisecond)))
		}
	}
	p99Goal.detail = strings.Join(parts, ", ")

	k := func(v float64) string { return fmt.Sprintf("%gk", v/1e3) }
	takeGoal := goal{text: fmt.Sprintf("strict takes ≥ %.1f× the old figures: ≥ %s/s at c=16, ≥ %s/s at c=64 (old %s, %s)", goalTakeGain,
		k(goalTakeGain*oldTakeC16), k(goalTakeGain*oldTakeC64), k(oldTakeC16), k(oldTakeC64)), measured: true, met: true}
	parts = nil
	for _, o := range []struct {
		c   int
		old float64
	}{{16, oldTakeC16}, {64, oldTakeC64}} {
		l, ok := findLookup(r, scStrict, o.c)
		if !ok {
			takeGoal.measured = false
			continue
		}
		takeGoal.met = takeGoal.met && l.PerSec >= goalTakeGain*o.old
		parts = append(parts, fmt.Sprintf("c=%d %s/s = %.2f× old", o.c, harness.Human(l.PerSec), l.PerSec/o.old))
	}
	takeGoal.detail = strings.Join(parts, ", ")
	return []goal{ratioGoal, p99Goal, takeGoal, envoyGoal(r)}
}

// envoyGoal is issue 27's take goal: floodgate's strict takes at least as
// many a second as envoyproxy/ratelimit's hits, at c=16 and c=64, in the
// same run.
func envoyGoal(r *Results) goal {
	g := goal{text: "strict takes ≥ 1.0× envoyproxy/ratelimit in the same run, at c=16 and c=64, Envoy's figure the mean of its runs just before and just after (issue 27)", measured: true, met: true}
	var parts []string
	for _, c := range []int{16, 64} {
		// the owner's takes (stage B) when measured, else the limiter's
		sc := scOwnerStrict
		take, ok1 := findLookup(r, sc, c)
		if !ok1 {
			sc = scStrict
			take, ok1 = findLookup(r, sc, c)
		}
		envoy, ok2 := envoyAt(r, c)
		if !ok1 || !ok2 {
			g.measured = false
			continue
		}
		g.met = g.met && take.PerSec >= envoy
		part := fmt.Sprintf("c=%d %s %s/s against %s/s = %.2f×", c, sc, harness.Human(take.PerSec), harness.Human(envoy), take.PerSec/envoy)
		if cold, ok := findLookup(r, scOwnerStrictCold, c); ok {
			// not the goal's: reported beside it
			part += fmt.Sprintf(" (subjects never seen: %s/s = %.2f×)", harness.Human(cold.PerSec), cold.PerSec/envoy)
		}
		parts = append(parts, part)
	}
	g.detail = strings.Join(parts, ", ")
	return g
}

// envoyAt is envoyproxy/ratelimit's hits a second at concurrency c: the
// mean of its runs before and after the owner's takes (one when the other
// is missing).
func envoyAt(r *Results, c int) (float64, bool) {
	var sum float64
	n := 0
	for _, sc := range []string{scEnvoy, scEnvoyAfter} {
		if l, ok := findLookup(r, sc, c); ok && l.PerSec > 0 {
			sum += l.PerSec
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}

// shortLabel names a scenario in a goal's detail.
func shortLabel(sc string) string {
	switch sc {
	case scAllowedOne:
		return "one limit"
	case scAllowedFour:
		return "four limits"
	}
	return sc
}

// liveGoal is issue 27's goal for the live aggregator: this share of
// ConsumerPerformance's rate on the same broker, in steady state.
const liveGoal = 0.85

// renderSteadyCPU writes where the steady-state runs' CPU went per event,
// and what the live goal leaves the live path once kafka-go, the decoder,
// the broker and Redis have taken theirs.
func renderSteadyCPU(w func(string, ...any), r *Results) {
	c := r.SteadyCPU
	if len(c.Live.Consumer) == 0 || len(c.Decode.Consumer) == 0 {
		return
	}
	cores := r.Machine.CPUs
	if cores <= 0 {
		cores = runtime.NumCPU()
	}
	w("\nCPU per event in the steady-state runs (%s events each), µs, median of the runs: each process's CPU time ÷ the events it covers. The consumer's process is ConsumerPerformance's JVM (over its whole run, start-up and group join included: no progress line reports CPU), the aggregator (over its steady window, from a quarter of the events counted to the last), or floodbench reading with the Fetcher; Redis is the aggregator's only. %d cores ÷ the sum is the most events a second this machine could give that consumer:\n\n",
		harness.Human(float64(r.SteadyEvents)), cores)
	w("| consumer | its process | Kafka broker | Redis | sum | %d cores ÷ sum | measured |\n|---|--:|--:|--:|--:|--:|--:|\n", cores)
	for _, v := range []struct {
		what  string
		cpu   SteadyCPU
		rates []float64
	}{
		{"ConsumerPerformance", c.Java, r.JavaSteady},
		{"live aggregator (write-back)", c.Live, r.LiveSteady.Rate},
		{"the aggregator's Fetcher alone, records dropped", c.Fetch, r.FetchSteady},
		{"the Fetcher, each record decoded", c.Decode, r.DecodeSteady},
	} {
		if len(v.cpu.Consumer) == 0 {
			continue
		}
		sum := v.cpu.sum()
		w("| %s | %.2f | %.2f | %.2f | %.2f | %s/s | %s/s |\n", v.what, harness.Median(v.cpu.Consumer), harness.Median(v.cpu.Broker),
			harness.Median(v.cpu.Redis), sum, harness.Human(float64(cores)*1e6/sum), harness.Human(harness.Median(v.rates)))
	}
	java := harness.Median(r.JavaSteady)
	if java <= 0 {
		return
	}
	goal := liveGoal * java
	budget := float64(cores) * 1e6 / goal
	read := harness.Median(c.Decode.Consumer) + harness.Median(c.Decode.Broker)
	redis := harness.Median(c.Live.Redis)
	own := harness.Median(c.Live.Consumer) - harness.Median(c.Decode.Consumer)
	left := fmt.Sprintf("%.2f µs would be left", budget-read-redis)
	if budget-read-redis < 0 {
		left = fmt.Sprintf("nothing would be left (%.2f µs short)", read+redis-budget)
	}
	w("\nThe live goal, %.2f× ConsumerPerformance's %s/s, is %s events/s: %d cores ÷ that = %.2f µs per event for every process together. Reading and decoding with kafka-go, the broker's part included, take %.2f µs of it, and the aggregator's Redis %.2f µs: %s for the live path's own work (gathering, evaluating, checkpoints, decisions), which takes %.2f µs today (the aggregator's process less the decoder run's).\n",
		liveGoal, harness.Human(java), harness.Human(goal), cores, budget, read, redis, left, own)
}
