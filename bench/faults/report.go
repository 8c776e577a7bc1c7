package faults

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
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
	return fmt.Sprintf("chaos %-4s %-55s produced=%d in-doubt=%d in-topic=%d postgres=%d redis=%d dlq=%d lost(pg/redis)=%d/%d dup(pg/redis)=%d/%d reported=%q recovery=%s %s",
		status, r.Fault, r.Produced, r.InDoubt, r.InTopic, r.Postgres, r.Redis, r.DeadLettered,
		r.LostPG, r.LostRedis, r.DupPG, r.DupRedis, r.Reported, r.Recovery.Round(100*time.Millisecond), r.Note)
}

// docRow is one scenario's lines of the fault table and notes, as kept in
// the document for runs of a subset (--only): a scenario not run keeps its
// earlier lines and says when they were measured.
type docRow struct {
	Scenario string `json:"scenario"`
	Table    string `json:"table"`
	Note     string `json:"note"`
	Measured string `json:"measured"` // "2006-01-02 15:04 UTC at commit `…`, 2000 events/s over 300 subjects"
}

// rowsMarker starts the comment at the end of the document holding its
// rows (JSON), read back by the next run.
const rowsMarker = "<!-- floodbench chaos rows (read back by --only runs; do not edit): "

// WriteDoc writes docs/faults.md: the method, the machine and the table.
// Scenarios not run this time (Config.Only) keep the rows the document
// already holds.
func WriteDoc(path string, s *Suite, rows []Row) error {
	m := harness.DescribeMachine(s.cfg.Repo)
	measured := fmt.Sprintf("%s at commit `%s`, %.0f events/s over %d subjects", m.Date.Format("2006-01-02 15:04 UTC"), m.Commit, s.cfg.Rate, s.cfg.Subjects)
	prev := readDocRows(path)
	ran := map[string]Row{}
	for _, r := range rows {
		ran[r.Scenario] = r
	}
	var doc []docRow
	kept := false
	for _, sc := range s.scenarios() {
		name := sc.name
		if r, ok := ran[name]; ok {
			doc = append(doc, renderRow(r, measured))
			continue
		}
		if d, ok := prev[name]; ok {
			doc = append(doc, d)
			kept = true
		}
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Faults\n\n")
	w("Written by `make chaos` (scripts/chaos → `go run ./bench/cmd/floodbench chaos`); do not edit by hand.\n\n")
	w("Measured %s on %d × %s, %s RAM, Linux %s, at commit `%s`; load average at the end %s.\n",
		m.Date.Format("2006-01-02 15:04 UTC"), m.CPUs, m.CPUModel, m.MemTotal, m.Kernel, m.Commit, m.LoadAvg)
	if kept {
		w("That run was `--only %s`: the other rows are kept from earlier runs, each note saying when it was measured.\n", strings.Join(s.cfg.Only, ","))
	}
	w("\n")
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
	w("The faults that take records out of Kafka (retention, a recreated topic) run a second aggregator on a\n")
	w("topic of their own and count against what the producer got acknowledged, not against the topic: there,\n")
	w("**lost** is what no one could count, and **reported** is what floodgate said about it — an ERROR log\n")
	w("naming group, partition and offsets, and a metric (live / history group). A loss is acceptable only\n")
	w("when it is reported: the result fails on any silent one.\n\n")
	w("| fault | produced (acked) | in topic | Postgres | Redis | dead-lettered | lost PG / Redis | dup PG / Redis | reported (ERROR + metric) | recovery | result |\n")
	w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, d := range doc {
		w("%s\n", d.Table)
	}
	w("\n### Notes per fault\n\n")
	for _, d := range doc {
		w("%s", d.Note)
		if d.Measured != measured {
			w(" (measured %s)", d.Measured)
		}
		w("\n")
	}
	w("\n## No silent loss: what each path does\n\n")
	w("- **Retention deleted events nobody had counted.** Each group (live and history) reads with fetch requests of its\n")
	w("  own (`aggregator.Fetcher`, read_committed), which never skip: a stored offset below the log's start is found when\n")
	w("  the partition resumes and while it runs. The group logs an ERROR naming itself, the partition and the offsets\n")
	w("  lost, adds them to `floodgate_aggregator_skipped_offsets_total{group,partition}`, and with `--on-lost-offsets=skip`\n")
	w("  (default) counts on from the log's start, the skipped offsets stored with the next batch; with `stop` the partition\n")
	w("  stops (`floodgate_aggregator_partition_stopped` = 1) and the others go on.\n")
	w("- **The topic was deleted and recreated.** A stored offset beyond the log's end (found three times in a row, a second apart, so a\n")
	w("  leader moving is not taken for it) is logged as an ERROR per group and partition and counted in\n")
	w("  `floodgate_aggregator_offset_resets_total`; with `skip` both sinks move their stored offset back to the new log's\n")
	w("  start (a compare-and-set: nothing moves if another owner moved it) and count the new log on top of what they hold.\n")
	w("  What the old topic held past the stored offsets is gone; Kafka cannot say how much. A recreated topic that already\n")
	w("  holds more records than the stored offset is not told apart from the old one.\n")
	w("- **`floodgate rebuild`** refuses while the live group has members (a running aggregator would write offsets of its\n")
	w("  own, and every replayed batch would be taken for a duplicate), reads committed records only, accepts events with\n")
	w("  the aggregator's `aggregator.Accept`, and finds lost offsets the same way: before it writes, from where the live\n")
	w("  group stood (its offset in Redis, else its Kafka commit), and while it reads; `--on-lost-offsets` as above, `stop`\n")
	w("  failing before any write.\n")
	w("- **An apply script failing part-way** (a foreign key under the prefix, WRONGTYPE) undoes the increments it made and\n")
	w("  fails: nothing is written, the batch is retried (`floodgate_aggregator_errors_total{op=\"apply\"}`, a WARN each) and\n")
	w("  counted once when it succeeds.\n")
	w("- **A crash between counting a deny and publishing it** loses nothing: the decision is in the partition's change\n")
	w("  stream, written by the same script as the counts, and the relay publishes from its cursor, moved only once Kafka\n")
	w("  acknowledged. Decisions are published at least once; every copy carries the same `id` (docs/redis.md, docs/events.md).\n")
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
	state, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("encode rows: %w", err)
	}
	w("\n%s%s -->\n", rowsMarker, state)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}

// renderRow is a row's table and notes lines.
func renderRow(r Row, measured string) docRow {
	res := "**pass**"
	if !r.Pass {
		res = "**FAIL**"
	}
	prod := fmt.Sprint(r.Produced)
	if r.InDoubt > 0 {
		prod += fmt.Sprintf(" (+%d in doubt)", r.InDoubt)
	}
	reported := r.Reported
	if reported == "" {
		reported = "—"
	}
	table := fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %d / %d | %d / %d | %s | %s | %s |",
		r.Fault, prod, r.InTopic, r.Postgres, r.Redis, r.DeadLettered, r.LostPG, r.LostRedis, r.DupPG, r.DupRedis,
		reported, r.Recovery.Round(100*time.Millisecond), res)
	note := fmt.Sprintf("- **%s** — recovery: %s.", r.Fault, r.RecoveryNote)
	if r.Note != "" {
		note += fmt.Sprintf(" %s.", strings.TrimSuffix(r.Note, "."))
	}
	return docRow{Scenario: r.Scenario, Table: table, Note: note, Measured: measured}
}

// legacyScenarios are the scenarios of documents written before the rows
// were kept, in their table order.
var legacyScenarios = []string{"baseline", "sigkill", "malformed", "bad-rules", "postgres", "kafka", "redis"}

var (
	measuredLine = regexp.MustCompile("^Measured (\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC) .* at commit (`[^`]*`)")
	loadLine     = regexp.MustCompile(`paced load of (\d+ events/s over \d+ subjects)`)
)

// readDocRows reads the rows of the document at path: from its rows
// comment, or, in a document written before it had one, from its table
// and notes in legacyScenarios order. Nothing (no file, another shape)
// is no rows.
func readDocRows(path string) map[string]docRow {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	text := string(b)
	out := map[string]docRow{}
	if i := strings.LastIndex(text, rowsMarker); i >= 0 {
		rest := text[i+len(rowsMarker):]
		if j := strings.Index(rest, " -->"); j >= 0 {
			var rows []docRow
			if json.Unmarshal([]byte(rest[:j]), &rows) == nil {
				for _, r := range rows {
					out[r.Scenario] = r
				}
			}
		}
		return out
	}
	var tables, notes []string
	measured := ""
	inNotes := false
	for _, l := range strings.Split(text, "\n") {
		switch {
		case measuredLine.MatchString(l):
			m := measuredLine.FindStringSubmatch(l)
			measured = m[1] + " at commit " + m[2] + measured
		case loadLine.MatchString(l):
			measured += ", " + loadLine.FindStringSubmatch(l)[1]
		case strings.HasPrefix(l, "### Notes per fault"):
			inNotes = true
		case strings.HasPrefix(l, "## "):
			inNotes = false
		case !inNotes && strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| fault |"):
			// Before the reported column: add it, empty.
			cells := strings.Split(l, " | ")
			if len(cells) == 10 {
				cells = append(cells[:8], append([]string{"—"}, cells[8:]...)...)
			}
			tables = append(tables, strings.Join(cells, " | "))
		case inNotes && strings.HasPrefix(l, "- **"):
			notes = append(notes, l)
		}
	}
	if len(tables) != len(legacyScenarios) || len(notes) != len(legacyScenarios) {
		return out
	}
	for i, name := range legacyScenarios {
		out[name] = docRow{Scenario: name, Table: tables[i], Note: notes[i], Measured: measured}
	}
	return out
}
