package faults

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/bench/harness"
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

// The markers around each profile's block in docs/faults.md: a run rewrites
// the blocks of the profiles it ran and keeps the others as they were, so
// `floodbench chaos --only cluster` does not erase the single-node table.
const (
	singleBlock  = "chaos-single"
	clusterBlock = "chaos-cluster"
	// attackBlock is make attack's (bench/attack): kept as it is here.
	attackBlock = "attack"
)

// WriteDoc writes docs/faults.md: the method, then each profile's block
// (machine, setup, table, notes) — rewritten for the profiles in runs,
// kept from the file for the others — then the explanations. Within a
// rewritten block, the rows of scenarios not run this time (Only) are kept
// from the file, each saying when it was measured.
func WriteDoc(path string, runs ...ProfileRows) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	blocks := map[string]string{
		singleBlock:  block(string(old), singleBlock),
		clusterBlock: block(string(old), clusterBlock),
		attackBlock:  block(string(old), attackBlock),
	}
	for _, r := range runs {
		if r.Suite.cluster {
			blocks[clusterBlock] = profileBlock(r.Suite, r.Rows, blocks[clusterBlock])
		} else {
			blocks[singleBlock] = profileBlock(r.Suite, r.Rows, blocks[singleBlock])
		}
	}
	for name, b := range blocks {
		if b == "" {
			blocks[name] = "Not measured yet.\n"
		}
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Faults\n\n")
	w("Written by `make chaos` (scripts/chaos → `go run ./bench/cmd/floodbench chaos`) and, its \"Attacks\" block,\n")
	w("by `make attack` (scripts/attack); do not edit by hand.\n")
	w("It runs the single-node profile's faults and, when `scripts/stack up --cluster` is up, the cluster\n")
	w("profile's; `scripts/chaos --only cluster` runs the latter alone and keeps the single-node table as it was.\n\n")
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
	w("## One broker, one Redis, one aggregator\n\n")
	w("<!-- %s:begin -->\n%s<!-- %s:end -->\n\n", singleBlock, blocks[singleBlock], singleBlock)
	w("## The cluster profile: two aggregators, a Redis Cluster, three brokers\n\n")
	w("<!-- %s:begin -->\n%s<!-- %s:end -->\n\n", clusterBlock, blocks[clusterBlock], clusterBlock)
	w("## Attacks: what a hostile client tried, and what held (`make attack`)\n\n")
	w("<!-- %s:begin -->\n%s<!-- %s:end -->\n\n", attackBlock, blocks[attackBlock], attackBlock)
	w("%s", explanations)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}

// block returns the text between name's markers in doc, "" when absent.
func block(doc, name string) string {
	begin, end := "<!-- "+name+":begin -->\n", "<!-- "+name+":end -->"
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return ""
	}
	return doc[i+len(begin) : j]
}

// docRow is one scenario's lines of a profile's table and notes, as kept
// in the document for runs of a subset (Only): a scenario not run keeps
// its earlier lines and says when they were measured.
type docRow struct {
	Scenario string `json:"scenario"`
	Table    string `json:"table"`
	Note     string `json:"note"`
	Measured string `json:"measured"` // "2006-01-02 15:04 UTC at commit `…`, 2000 events/s over 300 subjects"
}

// rowsMarker starts the comment at the end of a profile's block holding
// its rows, read back by the next run: one JSON object a line, so that no
// line of the document grows with the number of scenarios (an earlier
// format held them all as one array on the marker's line; it is still
// read).
const rowsMarker = "<!-- floodbench chaos rows (read back by --only runs; do not edit):"

// profileBlock is one profile's part of the document: machine, setup,
// table, notes. Scenarios of the profile not run keep the rows of old,
// the block the document held.
func profileBlock(s *Suite, rows []Row, old string) string {
	m := harness.DescribeMachine(s.cfg.Repo)
	measured := fmt.Sprintf("%s at commit `%s`, %.0f events/s over %d subjects", m.Date.Format("2006-01-02 15:04 UTC"), m.Commit, s.cfg.Rate, s.cfg.Subjects)
	list := singleScenarios
	if s.cluster {
		list = clusterScenarios
	}
	prev := readDocRows(old, list)
	ran := map[string]Row{}
	for _, r := range rows {
		ran[r.Scenario] = r
	}
	var doc []docRow
	kept := false
	for _, sc := range list {
		if r, ok := ran[sc.name]; ok {
			doc = append(doc, renderRow(r, measured))
		} else if d, ok := prev[sc.name]; ok {
			doc = append(doc, d)
			kept = true
		}
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("Measured %s on %d × %s, %s RAM, Linux %s, at commit `%s`; load average at the end %s.\n",
		m.Date.Format("2006-01-02 15:04 UTC"), m.CPUs, m.CPUModel, m.MemTotal, m.Kernel, m.Commit, m.LoadAvg)
	if kept {
		w("That run was `--only %s`: the other rows are kept from earlier runs, each note saying when it was measured.\n", strings.Join(s.cfg.Only, ","))
	}
	w("\n")
	if s.cluster {
		w("Each fault is injected alone, under a paced load of %.0f events/s (acks=all) over %d subjects on a\n", s.cfg.Rate, s.cfg.Subjects)
		w("12-partition topic replicated three times (`min.insync.replicas=2`), into two `floodgate aggregator`\n")
		w("processes sharing both groups (live → the Redis Cluster of 3 primaries + 3 replicas, history → Postgres);\n")
		w("nodes are killed with `scripts/stack stop --cluster NODE --kill` and started with `scripts/stack start --cluster NODE`:\n\n")
	} else {
		w("Each fault is injected alone, under a paced load of %.0f events/s over %d subjects, into one running\n", s.cfg.Rate, s.cfg.Subjects)
		w("`floodgate aggregator` (live group → Redis, history group → Postgres, one process):\n\n")
	}
	w("```\n%s %s\n```\n\n", s.cfg.Bin, strings.Join(s.aggregatorArgs("127.0.0.1:<port>"), " "))
	w("| fault | produced (acked) | in topic | Postgres | Redis | dead-lettered | lost PG / Redis | dup PG / Redis | reported (ERROR + metric) | recovery | result |\n")
	w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, d := range doc {
		w("%s\n", d.Table)
	}
	w("\n**Notes per fault**\n\n")
	for _, d := range doc {
		w("%s", d.Note)
		if d.Measured != measured {
			w(" (measured %s)", d.Measured)
		}
		w("\n")
	}
	w("\n%s", rowsComment(doc))
	return b.String()
}

// rowsComment is the rows comment: the marker, one JSON row a line, the
// comment's end. json.Marshal escapes '>' so no row can end the comment.
func rowsComment(rows []docRow) string {
	var b strings.Builder
	b.WriteString(rowsMarker + "\n")
	for _, r := range rows {
		line, err := json.Marshal(r)
		if err != nil {
			continue // a docRow is strings only: Marshal cannot fail
		}
		b.Write(line)
		b.WriteString("\n")
	}
	b.WriteString("-->\n")
	return b.String()
}

// parseRowsComment reads the rows after rowsMarker: one JSON row a line,
// or the earlier format's one array on the marker's line. A line that does
// not parse is skipped: that scenario is measured again by the next full
// run.
func parseRowsComment(rest string) []docRow {
	j := strings.Index(rest, "-->")
	if j < 0 {
		return nil
	}
	body := strings.TrimSpace(rest[:j])
	var rows []docRow
	if strings.HasPrefix(body, "[") {
		if json.Unmarshal([]byte(body), &rows) != nil {
			return nil
		}
		return rows
	}
	for _, l := range strings.Split(body, "\n") {
		var r docRow
		if l = strings.TrimSpace(l); l != "" && json.Unmarshal([]byte(l), &r) == nil {
			rows = append(rows, r)
		}
	}
	return rows
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

var (
	measuredLine = regexp.MustCompile("^Measured (\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC) .* at commit (`[^`]*`)")
	loadLine     = regexp.MustCompile(`paced load of (\d+ events/s)(?: \(acks=all\))? over (\d+ subjects)`)
)

// readDocRows reads the rows of a profile's block: from its rows comment,
// or, in a block written before it had one, from its table and notes: one
// row per scenario of list that the table names, in order. Nothing (no
// block, another shape) is no rows.
func readDocRows(block string, list []scenario) map[string]docRow {
	out := map[string]docRow{}
	if i := strings.LastIndex(block, rowsMarker); i >= 0 {
		for _, r := range parseRowsComment(block[i+len(rowsMarker):]) {
			out[r.Scenario] = r
		}
		return out
	}
	var tables, notes []string
	var measured, load string
	inNotes := false
	for _, l := range strings.Split(block, "\n") {
		switch {
		case measuredLine.MatchString(l):
			m := measuredLine.FindStringSubmatch(l)
			measured = m[1] + " at commit " + m[2]
		case loadLine.MatchString(l):
			m := loadLine.FindStringSubmatch(l)
			load = ", " + m[1] + " over " + m[2]
		case strings.HasPrefix(l, "**Notes per fault**") || strings.HasPrefix(l, "### Notes per fault"):
			inNotes = true
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
	if len(tables) != len(notes) {
		return out
	}
	// The rows of a block written before the rows were kept are the
	// profile's scenarios of that time, in order: matched by the fault
	// labels the scenarios still write.
	names := legacyNames(list, len(tables))
	if names == nil {
		return out
	}
	for i, name := range names {
		out[name] = docRow{Scenario: name, Table: tables[i], Note: notes[i], Measured: measured + load}
	}
	return out
}

// legacyNames are the scenarios a block written before the rows were kept
// holds n rows of: the profile's scenarios that were there then.
func legacyNames(list []scenario, n int) []string {
	var names []string
	for _, sc := range list {
		if !newScenarios[sc.name] {
			names = append(names, sc.name)
		}
	}
	if len(names) != n {
		return nil
	}
	return names
}

// newScenarios came with the rows comment: a block without one has none
// of them.
var newScenarios = map[string]bool{"apply-error": true, "crash-publish": true, "rebuild-beside": true, "retention-gap": true, "topic-recreated": true}

// explanations follow the tables.
const explanations = `## No silent loss: what each path does

- **Retention deleted events nobody had counted.** Each group (live and history) reads with fetch requests of its
  own (` + "`consume.Fetcher`" + `, read_committed), which never skip: a stored offset below the log's start is found when
  the partition resumes and while it runs. The group logs an ERROR naming itself, the partition and the offsets
  lost, adds them to ` + "`floodgate_aggregator_skipped_offsets_total{group,partition}`" + `, and with ` + "`--on-lost-offsets=skip`" + `
  (default) counts on from the log's start, the skipped offsets stored with the next batch; with ` + "`stop`" + ` the partition
  stops (` + "`floodgate_aggregator_partition_stopped`" + ` = 1) and the others go on.
- **The topic was deleted and recreated.** A stored offset beyond the log's end (found three times in a row, a second
  apart, so a leader moving is not taken for it) is logged as an ERROR per group and partition and counted in
  ` + "`floodgate_aggregator_offset_resets_total`" + `; with ` + "`skip`" + ` both sinks move their stored offset back to the new log's
  start (a compare-and-set: nothing moves if another owner moved it) and count the new log on top of what they hold.
  What the old topic held past the stored offsets is gone; Kafka cannot say how much. A recreated topic that already
  holds more records than the stored offset is not told apart from the old one.
- **` + "`floodgate rebuild`" + `** refuses while the live group has members (a running aggregator would write offsets of its
  own, and every replayed batch would be taken for a duplicate), reads committed records only, accepts events with
  the aggregator's ` + "`consume.Accept`" + `, and finds lost offsets the same way: before it writes, from where the live
  group stood (its offset in Redis, else its Kafka commit), and while it reads; ` + "`--on-lost-offsets`" + ` as above, ` + "`stop`" + `
  failing before any write.
- **A script failing part-way** (a foreign key under the prefix, WRONGTYPE) undoes the increments it made and
  fails: nothing is written, and it is retried until it succeeds, which counts them once. Written through, that is the
  batch's apply (` + "`floodgate_aggregator_errors_total{op=\"apply\"}`" + `); written back, the checkpoint that writes the
  buckets (` + "`floodgate_live_checkpoints_total{result=\"failed\"}`" + `); a WARN each.
- **A crash between counting a deny and publishing it** loses nothing: the decision is in the partition's change
  stream, written by the same script as the counts, and the relay publishes from its cursor, moved only once Kafka
  acknowledged. Decisions are published at least once; every copy carries the same ` + "`id`" + ` (docs/redis.md, docs/events.md).

## Redis loses its counters: counted again from Kafka

Redis holds only derived state: bucket counters, deny records and each partition's next offset, all
written by one script per batch. Kafka keeps the events far longer than the longest rule window, so the
counters can always be recomputed, and the running aggregator does it by itself. Each partition's
Headroom remembers that its slot held an offset; the batch or checkpoint that finds none (a restart
without persistence, a flush, a failover to an empty replica) writes nothing, and the group finds the
first offset at or after now − (longest window + 1 min) with Kafka's time index and reads the partition
again from there through the same ` + "`live.Applier`" + ` (` + "`consume.Recounter`" + `, an ERROR naming the offsets,
` + "`floodgate_aggregator_recounts_total`" + `). Events the limiter's strict mode had counted (header
` + "`floodgate-counted`" + `) up to the partition's end when the loss was found are counted too: those counts were
lost with Redis. Deny records come back as the recounted subjects are evaluated; until the recount
reaches where the partition stood its windows are short and its decisions late. An aggregator that
starts on partitions whose slots are gone while its group committed progress recounts them the same way.

` + "`recovery.Rebuild`" + ` (the ` + "`floodgate rebuild`" + ` subcommand) does the same offline, with the live aggregator
stopped: it is needed only with ` + "`--evaluate-all`" + `, whose write-through sink keeps no Headroom to notice the loss.
The table's Redis-restart row restarts Redis under load with the aggregator running, and re-checks every
earlier scenario's subjects in Redis after the recount.

## A Redis Cluster primary dies: what asynchronous replication loses

A Redis primary acknowledges a write as soon as it applied it; it streams it to its replica afterwards.
When the primary is killed, the replica that takes over (after the node timeout, 1.5 s on the cluster
profile) has everything the primary had sent it, and nothing after: **the last acknowledged writes of a
crashed primary can be lost** — the apply scripts of the last batches of each partition in its slots
(counts, deny records, decision state, change entries), and the strict takes it had admitted. A ` + "`CLUSTER\nFAILOVER`" + ` run on the replica loses nothing: the primary stops taking writes until the replica caught up.
A primary restarted before its replica took over comes back from its append-only file, which it writes
before replying (unless a slow disk makes it postpone) and fsyncs once a second (` + "`appendfsync everysec`" + `): a killed process normally loses
nothing there, a machine that loses power a second or two of writes — offsets with their counts, as below.

**Why the counts still end exact.** Every live key of a partition — its counters, its decision state, its
change stream and **its offset** — shares the partition's hash tag, so one slot, one primary, and one
replication stream in which each apply script is one atomic unit. Whatever a replica holds is therefore
the state after some batch *n* with the offset after batch *n*: counts and offset roll back together, to
a consistent past. The aggregator keeps reading from where it was; its next batch starts after the
rolled-back offset, and the apply script refuses it (it would skip what was lost) and tells where the slot
stands; the aggregator reads the partition again from there
(` + "`floodgate_aggregator_rewinds_total`" + `, an ERROR log), so the lost batches are applied again, once. Had the offsets
lived anywhere else (Kafka's commits, another slot, Postgres), a failover could leave counts behind an
offset that says they were written, and the lost events would be skipped for good. Postgres holds the
history group's offsets in its own transactions and is not affected. The row "Redis primary kill -9 with
acknowledged writes its replica lacks" forces that case (the replica is stopped and its link closed until
the primary acknowledged batches of each of its partitions, then the primary is killed) and shows the
replay; the plain kill -9 row usually loses nothing, the replica being a few milliseconds behind at most.

Until the partitions replay, the limiter's memory can be behind too: its change streams lost the same
entries, which it sees as a gap in their sequence numbers and answers by loading a new snapshot. Deny
records written by the lost batches come back as the batches are applied again.

**Strict takes can overshoot after such a loss.** A strict take is admitted by a script on the
subject's primary and counted there; a take counted on a primary that dies before replicating it is
lost with it, and the promoted replica does not know it was admitted, so later takes can be admitted
beyond the limit — as many as that primary admitted in its last moments before the kill (the
replication lag, a few milliseconds here). The replay does not bring them back: the limiter publishes a
take's event with the header ` + "`floodgate-counted`" + `, which the live sink skips (the take counted it), so the
window under-counts those takes until they age out of it (history counts them). The only cure is to
make the primary wait for its replica before answering: ` + "`WAIT 1 <timeout>`" + ` after each
take script holds each take until the replica acknowledged it: on this machine's loopback, an
` + "`INCR`" + ` went from 0.08–0.13 ms to 0.27–0.29 ms at the median and from 0.35 ms to 3.8–4.6 ms at the 99th
percentile with ` + "`WAIT 1`" + ` after it (3 000 of each, load average 8), and across availability zones each take
pays the network round trip to the replica besides. When the replica is down or slow, WAIT either makes
takes fail at its timeout or, with a short timeout, gives the guarantee up again; and Redis does not roll
back a write whose WAIT timed out. floodgate does not WAIT: a strict rule's overshoot is 0 while the primaries
live, and bounded by the replication lag when one dies.

**Owner takes (` + "`" + `aggregator --owner-takes` + "`" + `) keep what such a loss takes.** There the take stream is a
take's only durable copy before the events topic, so a lost entry would be a take's event lost for
good. The owner remembers each append Redis acknowledged until the apply counts its event; it
notices a stream that went back (an append's id not past the last one Redis gave it, or a last
generated id behind it, checked every 250 ms) with an ERROR, gives the stream a new epoch before
its next take (an old id could come again below the take relay's cursor), waits until the relay's produce
requests sent before the loss can no longer land, reads the stream, counts up to the partition's
end, and appends again what is still uncounted. A lost append the stream still holds landed at an id
that came again, one the relay may already have passed (it goes on from what it published), and so may
one without an answer sent as the stream went back: the owner deletes such an entry from the stream,
unless the relay's cursor notes it in a produce request (then it waits for
that request), and appends its events again at the new epoch, those the relay had published being
counted by then (` + "`" + `outcome="taken_back"` + "`" + `, live/takeback.lua; TestOwnerTakesAppendBehindTheRelayPublishedOnce
fails over to a stream and a cursor a replica would hold and runs the relay). An append that got no answer during the fault is
settled the same way: appended again if the stream held it, else dropped from the owner's windows (its take
was answered failed) (` + "`" + `floodgate_live_owner_take_doubts_total{outcome}` + "`" + `). Its own memory never lost
the takes, so its windows stay exact throughout, and its takes go on after a tick
(TestClusterOwnerTakesRedisPrimaryKill). The take relay's cursor can go back the same way, past entries
it published: the relay that finds an older value of its own token there, at its next read or move or
as it restarts (no other run writes it), goes on from its own position instead of reading back from the
older one (TestTakeRelayCursorGoneBack, TestTakeRelayClaimAfterRedisWentBack; stage A's takes gain
the same). A cursor Redis lost altogether (a restart without persistence, a flush) is claimed again
from the stream's start at the relay's next read: an idle relay used to read on past its own last
forever, passing by an owner's append that landed below it (TestTakeRelayCursorLost; CI's
TestOwnerTakesExactWhenRedisLosesEverything once timed out on it). The decisions relay goes on when the change stream's sequence numbers go back; it used
to count a negative loss and panic (TestRelayGoesOnWhenTheChangeStreamGoesBack). Lost entries not yet appended again when the partition moves, and appended ones its stream
no longer holds (a loss not noticed yet), are handed over to its next owner in the slot, which
settles them as its own
(` + "`" + `outcome="handed_over"` + "`" + `, ` + "`" + `"taken_over"` + "`" + `; TestOwnerTakesHandLostTakesOver stops the owner as soon as it
noticed); a hand-over a newer owner's fence came before is refused (` + "`" + `"dropped"` + "`" + `, an ERROR). Not
covered: a relay that dies in the same moments as the
primary (its successor trusts the older cursor and may publish up to a replication lag of entries
twice).

**A slot lost whole is counted again from the log.** A failover before a partition's first checkpoint
reached the replica, or a Redis restarted without persistence, leaves no offset at all where the
aggregator had stored one. The aggregator does not take that for a new partition. The batch or
checkpoint that finds the slot gone is refused, nothing of it written (` + "`" + `floodgate_live_offset_missing_total` + "`" + `),
and the group reads the partition again from the first offset written the longest window plus a
minute ago (Kafka's ListOffsets by time), with an ERROR naming the offsets,
` + "`" + `floodgate_aggregator_recounts_total` + "`" + ` and ` + "`" + `floodgate_aggregator_recounted_offsets_total` + "`" + `. An aggregator
that starts on a partition its group committed progress on and finds the slot gone does the same. The
events the limiter had counted (` + "`" + `floodgate-counted` + "`" + `) up to the partition's end when the loss was found
are counted again with the rest, since their counts were in the slot lost; that end is kept in the slot
(` + "`" + `@recount` + "`" + `), so an owner that takes the partition over mid-recount counts them too. Owner takes of the
partition stay closed until the recount has counted up to the partition's end. Until then its windows
are short and its decisions late: a recount reads up to a day of the partition, at the aggregator's
speed (TestAggregatorRecountsWhatRedisLost pauses the aggregator, deletes every key of the live path
and finds the counts exact against the topic; TestSinkRecountsASlotRedisLost,
TestGroupRecountsASinkThatLostItsStore; TestClusterOwnerTakesRedisPrimaryKill no longer waits for
checkpoints before its kill). Not covered: ` + "`" + `--evaluate-all` + "`" + ` (write-through without a Headroom) keeps
the ERROR ` + "`" + `the partition's offset was missing from Redis although this sink had stored one` + "`" + ` and goes
on without what was lost (run ` + "`" + `floodgate rebuild` + "`" + `); a stage-A take the limiter counted in the new slot
between the loss and its finding (at most a checkpoint interval) is counted twice, on the safe side. Operator resets and bans live in Redis
and go with it: a recount counts a reset subject's events of the last day again.
`
