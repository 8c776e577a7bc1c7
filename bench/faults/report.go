package faults

import (
	"fmt"
	"os"
	"strings"
	"time"

	"floodgate/bench/harness"
)

// FormatRow is the one-line console form of a row.
func FormatRow(r Row) string {
	status := "PASS"
	if !r.Pass {
		status = "FAIL"
	}
	return fmt.Sprintf("chaos %-4s %-55s produced=%d in-doubt=%d in-topic=%d postgres=%d redis=%d dlq=%d lost(pg/redis)=%d/%d dup(pg/redis)=%d/%d recovery=%s %s",
		status, r.Fault, r.Produced, r.InDoubt, r.InTopic, r.Postgres, r.Redis, r.DeadLettered,
		r.LostPG, r.LostRedis, r.DupPG, r.DupRedis, r.Recovery.Round(100*time.Millisecond), r.Note)
}

// WriteDoc writes docs/faults.md: the method, the machine and the table.
func WriteDoc(path string, s *Suite, rows []Row) error {
	m := harness.DescribeMachine(s.cfg.Repo)
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Faults\n\n")
	w("Written by `make chaos` (scripts/chaos → `go run ./bench/cmd/floodbench chaos`); do not edit by hand.\n\n")
	w("Measured %s on %d × %s, %s RAM, Linux %s, at commit `%s`; load average at the end %s.\n\n",
		m.Date.Format("2006-01-02 15:04 UTC"), m.CPUs, m.CPUModel, m.MemTotal, m.Kernel, m.Commit, m.LoadAvg)
	w("Each fault is injected alone, under a paced load of %.0f events/s over %d subjects, into one running\n", s.cfg.Rate, s.cfg.Subjects)
	w("`floodgate aggregator` (live group → Redis, history group → Postgres, one process):\n\n")
	w("```\n%s %s\n```\n\n", s.cfg.Bin, strings.Join(s.aggregatorArgs("127.0.0.1:<port>"), " "))
	w("Counting, per scenario and per subject: **in topic** is what Kafka holds (read back from the topic, the\n")
	w("truth: a Publish that failed during a broker restart may still have landed); **Postgres** is the all-time\n")
	w("totals table (`floodgate.top`); **Redis** is the 1-day window sum of each subject through `window.Store.Check`.\n")
	w("**Lost** and **dup** are summed per subject (shortfall and excess against the topic), so one cannot hide\n")
	w("the other. **Recovery** is from the fault's start until both groups (live and history) have applied every\n")
	w("event that was in Kafka half a second after the fault ended (service back, process restarted).\n")
	w("The design promises zero lost and zero dup everywhere except Redis in the Redis-restart case (Redis runs\n")
	w("without persistence: a restart loses counters, deny records and offsets), where the rebuild restores them.\n\n")
	w("| fault | produced (acked) | in topic | Postgres | Redis | dead-lettered | lost PG / Redis | dup PG / Redis | recovery | result |\n")
	w("|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, r := range rows {
		res := "**pass**"
		if !r.Pass {
			res = "**FAIL**"
		}
		prod := fmt.Sprint(r.Produced)
		if r.InDoubt > 0 {
			prod += fmt.Sprintf(" (+%d in doubt)", r.InDoubt)
		}
		w("| %s | %s | %d | %d | %d | %d | %d / %d | %d / %d | %s | %s |\n",
			r.Fault, prod, r.InTopic, r.Postgres, r.Redis, r.DeadLettered, r.LostPG, r.LostRedis, r.DupPG, r.DupRedis,
			r.Recovery.Round(100*time.Millisecond), res)
	}
	w("\n### Notes per fault\n\n")
	for _, r := range rows {
		w("- **%s** — recovery: %s.", r.Fault, r.RecoveryNote)
		if r.Note != "" {
			w(" %s.", strings.TrimSuffix(r.Note, "."))
		}
		w("\n")
	}
	w("\n## Redis loses its counters: rebuild from Kafka\n\n")
	w("Redis holds only derived state: bucket counters, deny records and each partition's next offset, all\n")
	w("written by one script per batch. Kafka keeps the events far longer than the longest rule window, so the\n")
	w("counters can always be recomputed. `recovery.Rebuild` does it: with the live aggregator stopped it deletes\n")
	w("the key prefix (the counters written since the restart are partial), finds for each partition the first\n")
	w("offset at or after now − (longest window + 1 min) with Kafka's time index, and replays each partition to its\n")
	w("current end through the same `window.Store.Apply` the aggregator uses — so the offsets are stored with the\n")
	w("counters and the aggregator, restarted, resumes exactly where the rebuild stopped (no gap, no double count).\n")
	w("Events the limiter's strict mode had counted (header `floodgate-counted`) are counted too: those counts\n")
	w("were lost with Redis. Deny records come back as the replayed subjects are evaluated.\n\n")
	w("Without a rebuild the aggregator still recovers by itself: it keeps running through the outage, retries\n")
	w("each batch until Redis answers, and from then on counts new events exactly; only the windows that\n")
	w("straddle the restart undercount, for at most the longest window (1 day with the example rules).\n\n")
	w("Operationally: `scripts/stack restart-service redis` (or a failover to an empty replica) → stop the live\n")
	w("aggregator → run the rebuild (`recovery.Rebuild` with `Reset`; the `floodgate rebuild` subcommand in\n")
	w("cmd/floodgate/rebuild.go wraps it) → start the aggregator. The table's Redis-restart row measures exactly\n")
	w("that sequence, and re-checks every earlier scenario's subjects in Redis after the rebuild.\n")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}
