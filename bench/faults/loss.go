package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/stacktest/promtext"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/producer"
)

// The scenarios of issue 12 ("no silent loss"): paths where events or
// decisions can go missing. Each row says what was lost, what was
// reported (an ERROR log and a metric) and what was duplicated.

// side is a second aggregator over a topic of its own, for scenarios that
// destroy part of a topic (retention, deletion): the suite's topic and the
// later scenarios' truth stay whole.
type side struct {
	s          *Suite
	name       string
	topic      string
	live, hist string
	pref       string
	parts      int
	store      *window.Store
	agg        *childproc.Proc
	mets       string
	produced   map[string]int64 // per subject, acknowledged
}

func (s *Suite) newSide(ctx context.Context, name string, parts int) (*side, error) {
	id := s.id + "-" + name
	sd := &side{s: s, name: name, topic: "floodgate.chaos." + id, live: "chaos-" + id + "-live", hist: "chaos-" + id + "-history",
		pref: "chaos" + strings.ReplaceAll(id, "-", ""), parts: parts, produced: map[string]int64{}}
	if err := s.kafka.CreateTopic(ctx, sd.topic, parts); err != nil {
		return nil, err
	}
	var err error
	if sd.store, err = window.NewStore(s.rdb, window.StoreConfig{Prefix: sd.pref, Partitions: func() int { return parts }}); err != nil {
		return nil, err
	}
	s.sides = append(s.sides, sd)
	return sd, nil
}

// start runs the side's aggregator (live and history groups) with extra args.
func (sd *side) start(ctx context.Context, args ...string) error {
	s := sd.s
	addr, err := childproc.FreePort()
	if err != nil {
		return err
	}
	s.aggN++
	a := []string{"aggregator",
		"--brokers", strings.Join(s.brokers, ","),
		"--topic", sd.topic, "--dlq-topic", s.dlq, "--decisions-topic", s.dec,
		"--live-group", sd.live, "--history-group", sd.hist, "--key-prefix", sd.pref,
		"--redis-addr", s.redisAddr, "--postgres-url", s.cfg.PostgresURL,
		"--rules", s.rules, "--metrics-addr", addr, "--session-timeout", "6s",
	}
	p, err := childproc.Start(ctx, childproc.Config{Name: sd.name + "-aggregator-" + strconv.Itoa(s.aggN), Bin: s.cfg.Bin, Args: append(a, args...), LogDir: s.cfg.WorkDir})
	if err != nil {
		return err
	}
	sd.agg, sd.mets = p, "http://"+addr+"/metrics"
	if err := childproc.WaitHTTP(ctx, sd.mets, 30*time.Second); err != nil {
		return fmt.Errorf("%s aggregator did not serve metrics: %w (log: %s)", sd.name, err, p.Tail(5))
	}
	return nil
}

// burst publishes n events over the suite's subject count, synchronously.
func (sd *side) burst(ctx context.Context, n int) error {
	pub, err := producer.New(producer.Config{Brokers: sd.s.brokers, Topic: sd.topic, MaxAttempts: 3, WriteTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer pub.Close()
	now := time.Now()
	evs := make([]event.Event, 0, n)
	for i := range n {
		evs = append(evs, event.Event{V: event.Version, ID: event.NewID(), Action: sd.s.act, Kind: "ip",
			Subject: sd.name + "-" + strconv.Itoa(i%sd.s.cfg.Subjects), TS: now, N: 1})
	}
	if err := pub.Publish(ctx, evs...); err != nil {
		return fmt.Errorf("%s: publish %d events: %w", sd.name, n, err)
	}
	for _, e := range evs {
		sd.produced[e.Subject]++
	}
	return nil
}

// offsets returns the live and history groups' stored next offsets.
func (sd *side) offsets(ctx context.Context) (live, hist map[int]int64, err error) {
	live = map[int]int64{}
	for p := range sd.parts {
		n, ok, err := sd.store.Resume(ctx, sd.live, sd.topic, p)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			live[p] = n
		}
	}
	hist, err = historyOffsets(ctx, sd.s.pool, sd.hist, sd.topic)
	return live, hist, err
}

// waitAt waits until both groups stored the topic's current end offsets.
func (sd *side) waitAt(ctx context.Context, timeout time.Duration) error {
	end, err := sd.ends(ctx)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		live, hist, err := sd.offsets(ctx)
		if err == nil {
			done := true
			for p, e := range end {
				done = done && live[p] == e && hist[p] == e
			}
			if done {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: groups at live %v, history %v after %s; topic ends at %v (last error %v)", sd.name, live, hist, timeout, end, err)
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// ends returns the topic's end offsets, waiting a moment for the metadata
// of a topic created (or recreated) a moment ago.
func (sd *side) ends(ctx context.Context) (map[int]int64, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		end, err := sd.s.kafka.EndOffsets(ctx, sd.topic)
		if err == nil && len(end) == sd.parts {
			return end, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: end offsets of %s: %v (%d partitions)", sd.name, sd.topic, err, len(end))
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// count compares Postgres and Redis with what was acknowledged: against
// the producer, not the topic, since these faults take records out of it.
func (sd *side) count(ctx context.Context, row *Row) error {
	s := sd.s
	pg, err := s.pgCounts(ctx, sd.name+"-")
	if err != nil {
		return err
	}
	rc, err := s.redisCounts(ctx, sd.store, sd.name+"-", sd.produced)
	if err != nil {
		return err
	}
	for _, v := range sd.produced {
		row.Produced += v
	}
	row.Postgres, row.LostPG, row.DupPG = compare(sd.produced, pg)
	row.Redis, row.LostRedis, row.DupRedis = compare(sd.produced, rc)
	return nil
}

// reported is what the side's aggregator said of a loss, per group: a
// metric's sum and its ERROR lines holding a text.
type reported struct {
	live, hist       float64
	errLive, errHist int
}

// report scrapes metric once and counts the ERROR lines holding text, for
// the live and the history group.
func (sd *side) report(ctx context.Context, metric, text string) (reported, error) {
	m, err := promtext.Scrape(ctx, sd.mets)
	if err != nil {
		return reported{}, err
	}
	return reported{
		live: m.Sum(metric, `group="`+sd.live+`"`), hist: m.Sum(metric, `group="`+sd.hist+`"`),
		errLive: sd.errorLines(text, "group="+sd.live+" "), errHist: sd.errorLines(text, "group="+sd.hist+" "),
	}, nil
}

// errorLines counts the ERROR lines of the side's aggregator log holding
// every one of want.
func (sd *side) errorLines(want ...string) int {
	n := 0
	for _, l := range strings.Split(childproc.TailFile(sd.agg.LogPath, 100000), " | ") {
		if !strings.Contains(l, "level=ERROR") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			n++
		}
	}
	return n
}

func (sd *side) close(ctx context.Context) {
	s := sd.s
	if sd.agg != nil {
		_ = sd.agg.Stop(15 * time.Second)
	}
	if err := stacktest.DeletePrefix(ctx, s.rdb, sd.pref); err != nil {
		s.log.Warn("chaos: cleanup redis", "prefix", sd.pref, "err", err)
	}
	if err := s.kafka.DeleteTopics(ctx, sd.topic); err != nil {
		s.log.Warn("chaos: cleanup topic", "topic", sd.topic, "err", err)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM floodgate.consumer_offsets WHERE consumer_group = $1`, sd.hist); err != nil {
		s.log.Warn("chaos: cleanup offsets", "group", sd.hist, "err", err)
	}
}

// retentionGap: the aggregator is stopped while events pile up; retention
// deletes the oldest of them on two of four partitions (records nobody
// counted; Kafka's DeleteRecords, as a retention.ms or retention.bytes
// that caught up with a stopped consumer would); the aggregator restarts.
func (s *Suite) retentionGap(ctx context.Context) (Row, error) {
	row := Row{Fault: "retention deleted events nobody had counted (aggregator stopped)"}
	sd, err := s.newSide(ctx, "gap", 4)
	if err != nil {
		return row, err
	}
	if err := sd.start(ctx); err != nil {
		return row, err
	}
	if err := sd.burst(ctx, 4000); err != nil {
		return row, err
	}
	if err := sd.waitAt(ctx, 90*time.Second); err != nil {
		return row, err
	}
	if err := sd.agg.Stop(20 * time.Second); err != nil {
		return row, err
	}
	stored, _, err := sd.offsets(ctx)
	if err != nil {
		return row, err
	}
	if err := sd.burst(ctx, 4000); err != nil {
		return row, err
	}
	end, err := sd.ends(ctx)
	if err != nil {
		return row, err
	}
	cut := map[int]int64{}
	var deleted int64
	for _, p := range []int{0, 1} {
		cut[p] = stored[p] + (end[p]-stored[p])/2
		deleted += cut[p] - stored[p]
	}
	if _, err := topics.DeleteRecords(ctx, s.brokers, sd.topic, cut); err != nil {
		return row, err
	}
	if err := sd.burst(ctx, 2000); err != nil {
		return row, err
	}
	start := time.Now()
	if err := sd.start(ctx); err != nil {
		return row, err
	}
	if err := sd.waitAt(ctx, 90*time.Second); err != nil {
		return row, err
	}
	row.Recovery = time.Since(start)
	row.RecoveryNote = "restart → both groups at the topic's end"
	if err := sd.count(ctx, &row); err != nil {
		return row, err
	}
	// What the topic held when the groups read it.
	row.InTopic = row.Produced - deleted
	rep, err := sd.report(ctx, "floodgate_aggregator_skipped_offsets_total", "offsets lost")
	if err != nil {
		return row, err
	}
	skipLive, skipHist, errLive, errHist := rep.live, rep.hist, rep.errLive, rep.errHist
	row.Reported = fmt.Sprintf("%.0f / %.0f offsets", skipLive, skipHist)
	row.Note = fmt.Sprintf("%d offsets deleted on partitions 0 and 1 (%v → %v) while the aggregator was stopped; "+
		"floodgate_aggregator_skipped_offsets_total live %.0f, history %.0f; ERROR lines naming group, partition and offsets: live %d, history %d; "+
		"every event after the gap counted (default --on-lost-offsets=skip; stop instead stops the partition: cmd/floodgate TestAggregatorRetentionGap)",
		deleted, mapStr(stored, 0, 1), mapStr(cut, 0, 1), skipLive, skipHist, errLive, errHist)
	row.Pass = row.LostPG == deleted && row.LostRedis == deleted && row.DupPG == 0 && row.DupRedis == 0 &&
		int64(skipLive) == deleted && int64(skipHist) == deleted && errLive == 2 && errHist == 2
	return row, nil
}

// topicRecreated: the aggregator is stopped with events piled up, the topic
// is deleted and created again, and new events arrive; the offsets the
// groups stored lie beyond the new log's end.
func (s *Suite) topicRecreated(ctx context.Context) (Row, error) {
	row := Row{Fault: "topic deleted and recreated (aggregator stopped)"}
	const parts, gone = 4, 1000
	sd, err := s.newSide(ctx, "recreate", parts)
	if err != nil {
		return row, err
	}
	if err := sd.start(ctx); err != nil {
		return row, err
	}
	if err := sd.burst(ctx, 4000); err != nil {
		return row, err
	}
	if err := sd.waitAt(ctx, 90*time.Second); err != nil {
		return row, err
	}
	if err := sd.agg.Stop(20 * time.Second); err != nil {
		return row, err
	}
	stored, _, err := sd.offsets(ctx)
	if err != nil {
		return row, err
	}
	// Piled up, never counted: gone with the old topic.
	if err := sd.burst(ctx, gone); err != nil {
		return row, err
	}
	if err := s.kafka.DeleteTopics(ctx, sd.topic); err != nil {
		return row, err
	}
	for {
		res, err := topics.Ensure(ctx, s.brokers, topics.Spec{Name: sd.topic, Partitions: parts})
		if err == nil && res[0].Created {
			break
		}
		if ctx.Err() != nil {
			return row, fmt.Errorf("recreate %s: %w", sd.topic, errors.Join(err, ctx.Err()))
		}
		sleep(ctx, 100*time.Millisecond)
	}
	if err := sd.burst(ctx, 800); err != nil {
		return row, err
	}
	end, err := sd.ends(ctx)
	if err != nil {
		return row, err
	}
	beyond := 0
	for p := range parts {
		if stored[p] > end[p] {
			beyond++
		}
	}
	start := time.Now()
	if err := sd.start(ctx); err != nil {
		return row, err
	}
	if err := sd.waitAt(ctx, 90*time.Second); err != nil {
		return row, err
	}
	row.Recovery = time.Since(start)
	row.RecoveryNote = "restart → both groups at the new topic's end"
	// What the old topic held past the stored offsets was never counted:
	// the truth is what was counted before plus the new topic.
	if err := sd.count(ctx, &row); err != nil {
		return row, err
	}
	// What the topics held when the groups read them: the old one up to
	// the stored offsets, the new one.
	row.InTopic = row.Produced - gone
	rep, err := sd.report(ctx, "floodgate_aggregator_offset_resets_total", "beyond the log's end")
	if err != nil {
		return row, err
	}
	resetLive, resetHist, errLive, errHist := rep.live, rep.hist, rep.errLive, rep.errHist
	row.Reported = fmt.Sprintf("%.0f / %.0f partitions reset", resetLive, resetHist)
	row.Note = fmt.Sprintf("stored offsets beyond the new end on %d of %d partitions; floodgate_aggregator_offset_resets_total live %.0f, history %.0f; "+
		"ERROR lines: live %d, history %d; the %d events piled up in the old topic are lost with it (Kafka cannot say how many: reported per partition, not counted); "+
		"the new topic counted from its start. Reported = partitions reset. A recreated topic that already holds more records than the stored offset is not detected (its first records would be skipped)",
		beyond, parts, resetLive, resetHist, errLive, errHist, gone)
	row.Pass = beyond == parts && row.LostPG == gone && row.LostRedis == gone && row.DupPG == 0 && row.DupRedis == 0 &&
		int(resetLive) == parts && int(resetHist) == parts && errLive == parts && errHist == parts
	return row, nil
}

// rebuildBeside: `floodgate rebuild --reset` while the aggregator runs,
// under load. It must refuse and touch nothing.
func (s *Suite) rebuildBeside(ctx context.Context) (Row, error) {
	row := Row{Fault: "`floodgate rebuild --reset` beside the running aggregator"}
	m, err := s.mark(ctx)
	if err != nil {
		return row, err
	}
	stop := s.load(ctx, "rebuild")
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	sleep(ctx, 2*time.Second)
	cmd := exec.CommandContext(ctx, s.cfg.Bin, "rebuild", "--reset",
		"--brokers", strings.Join(s.brokers, ","), "--redis-addr", s.redisAddr,
		"--topic", s.topic, "--live-group", s.live, "--key-prefix", s.pref, "--rules", s.rules)
	start := time.Now()
	out, runErr := cmd.CombinedOutput()
	took := time.Since(start)
	var exit *exec.ExitError
	refused := errors.As(runErr, &exit) && strings.Contains(string(out), "running members")
	sleep(ctx, 2*time.Second)
	t := stop()
	stop = nil
	if err := s.count(ctx, "rebuild", m, t, &row); err != nil {
		return row, err
	}
	msg := strings.TrimSpace(string(out))
	if i := strings.LastIndex(msg, "\n"); i >= 0 {
		msg = msg[i+1:]
	}
	row.Recovery = took
	row.RecoveryNote = "no outage; time until the rebuild refused"
	if refused {
		row.Reported = "refused (exit 1)"
	}
	row.Note = fmt.Sprintf("refused: %v (%q); counting went on untouched", refused, msg)
	verdict(&row, false)
	row.Pass = row.Pass && refused
	return row, nil
}

// applyError: a key of a foreign type under the prefix, where a subject's
// bucket is incremented (WRONGTYPE), under load. The script that writes
// there fails part-way — an apply written through, a checkpoint written
// back — and must write nothing; it is retried until the key is gone.
func (s *Suite) applyError(ctx context.Context) (Row, error) {
	row := Row{Fault: "apply script error part-way (WRONGTYPE on a foreign key under the prefix)"}
	m, err := s.mark(ctx)
	if err != nil {
		return row, err
	}
	before, err := promtext.Scrape(ctx, s.mets)
	if err != nil {
		return row, err
	}
	stop := s.load(ctx, "apply")
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	sleep(ctx, time.Second)
	// The hour buckets of one subject of the load, this hour and the next:
	// every batch with its events fails on them, after the increments of
	// the subjects before it in the batch.
	sub := window.Subject{Action: s.act, Kind: "ip", Subject: "apply-7"}
	part := window.Partition(sub, 12)
	now := time.Now()
	keys := []string{s.store.Keys().Bucket(part, sub, 'm', now), s.store.Keys().Bucket(part, sub, 'm', now.Add(time.Hour))}
	for _, k := range keys {
		if err := s.rdb.Set(ctx, k, "not a hash", 0).Err(); err != nil {
			return row, err
		}
	}
	start := time.Now()
	sleep(ctx, 5*time.Second)
	if err := s.rdb.Del(ctx, keys...).Err(); err != nil {
		return row, err
	}
	if err := s.waitPast(ctx, 60*time.Second); err != nil {
		return row, err
	}
	row.Recovery = time.Since(start)
	row.RecoveryNote = "foreign keys set → both groups past the topic's end once they were deleted (5 s later)"
	after, err := promtext.Scrape(ctx, s.mets)
	if err != nil {
		return row, err
	}
	t := stop()
	stop = nil
	if err := s.count(ctx, "apply", m, t, &row); err != nil {
		return row, err
	}
	delta := func(name string, labels ...string) float64 {
		labels = append(labels, `group="`+s.live+`"`)
		return after.Sum(name, labels...) - before.Sum(name, labels...)
	}
	// Write-back counts window-only subjects in memory: its checkpoints
	// write the buckets, so they are what fails there.
	applies := delta("floodgate_aggregator_errors_total", `op="apply"`)
	checkpoints := delta("floodgate_live_checkpoints_total", `result="failed"`)
	row.Note = fmt.Sprintf("partition %d's batches failed %.0f times (floodgate_aggregator_errors_total{op=\"apply\"}) and its checkpoints %.0f times "+
		"(floodgate_live_checkpoints_total{result=\"failed\"}), a WARN each, retried: nothing skipped; "+
		"each failed run undid its increments, so the retries counted nothing twice", part, applies, checkpoints)
	row.Reported = fmt.Sprintf("%.0f failed applies, %.0f failed checkpoints", applies, checkpoints)
	verdict(&row, false)
	row.Pass = row.Pass && applies+checkpoints > 0
	return row, nil
}

// crashBeforePublish: deny decisions are counted and written into the
// change streams while the decisions topic is gone (the relay cannot
// publish); the aggregator is SIGKILLed there, the topic comes back, the
// aggregator restarts. Every decision must reach the topic; a duplicate
// carries the same id.
func (s *Suite) crashBeforePublish(ctx context.Context) (Row, error) {
	const probes = 20
	row := Row{Fault: "SIGKILL between counting a deny and publishing it (decisions topic down)"}
	m, err := s.mark(ctx)
	if err != nil {
		return row, err
	}
	stop := s.load(ctx, "publish")
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	sleep(ctx, time.Second)
	if err := s.kafka.DeleteTopics(ctx, s.dec); err != nil {
		return row, err
	}
	tag := "pub-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-"
	var evs []event.Event
	var qs []window.Query
	for i := range probes {
		subj := tag + strconv.Itoa(i)
		for range 5 {
			evs = append(evs, event.Event{V: 1, ID: event.NewID(), Action: s.deny, Kind: "ip", Subject: subj, TS: time.Now(), N: 1})
		}
		qs = append(qs, window.Query{Subject: window.Subject{Action: s.deny, Kind: "ip", Subject: subj}, Windows: []time.Duration{time.Minute}})
	}
	if err := s.pub.Publish(ctx, evs...); err != nil {
		return row, err
	}
	// Counted: every probe has its deny record (written by the same
	// script run as the change entry the relay publishes from).
	for denied := 0; denied < probes; {
		st, err := s.store.Check(ctx, time.Now(), qs)
		if err != nil {
			return row, err
		}
		denied = 0
		for _, x := range st {
			if x.Deny != nil {
				denied++
			}
		}
		if ctx.Err() != nil {
			return row, ctx.Err()
		}
		sleep(ctx, 50*time.Millisecond)
	}
	start := time.Now()
	s.killAggregator(s.agg)
	if err := s.kafka.CreateTopic(ctx, s.dec, 3); err != nil {
		return row, err
	}
	if err := s.startAggregator(ctx); err != nil {
		return row, err
	}
	// Read the topic until every probe's decision is there.
	ids := map[string]int{} // decision id -> times read
	subjects := map[string]bool{}
	deadline := time.Now().Add(90 * time.Second)
	var readErr error
	for len(subjects) < probes && time.Now().Before(deadline) {
		// The metadata of the topic created a moment ago may lag: an
		// error here is retried.
		end, err := s.kafka.EndOffsets(ctx, s.dec)
		if err == nil {
			clear(ids)
			clear(subjects)
			err = s.kafka.ReadRange(ctx, s.dec, map[int]int64{}, end, func(msg kafka.Message) {
				var d window.DecisionMessage
				if json.Unmarshal(msg.Value, &d) == nil && strings.HasPrefix(d.Subject, tag) {
					ids[d.ID]++
					subjects[d.Subject] = true
				}
			})
		}
		readErr = err
		sleep(ctx, 200*time.Millisecond)
	}
	if len(subjects) < probes && readErr != nil {
		return row, fmt.Errorf("read %s: %w", s.dec, readErr)
	}
	row.Recovery = time.Since(start)
	row.RecoveryNote = "SIGKILL → every probe's decision on the recreated topic"
	dups := 0
	for _, n := range ids {
		dups += n - 1
	}
	t := stop()
	stop = nil
	if err := s.count(ctx, "publish", m, t, &row); err != nil {
		return row, err
	}
	row.Note = fmt.Sprintf("%d deny decisions counted while the topic was gone (records and change entries in Redis, nothing published), then SIGKILL: "+
		"%d of %d published after the restart, %d duplicates (same id p<partition>-<entry id>-<i>: consumers drop them)", probes, len(subjects), probes, dups)
	verdict(&row, false)
	row.Pass = row.Pass && len(subjects) == probes
	return row, nil
}

func mapStr(m map[int]int64, keys ...int) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("p%d:%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
