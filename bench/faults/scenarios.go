package faults

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest/childproc"
	"github.com/floodgate-dev/floodgate/internal/stacktest/promtext"
	"github.com/floodgate-dev/floodgate/internal/window"
)

type kafkaMessage = kafka.Message

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// baseline: load, no fault. The control row.
func (s *Suite) baseline(ctx context.Context) (Row, error) {
	row := Row{Fault: "none (baseline, 6 s of load)"}
	m, err := s.mark(ctx)
	if err != nil {
		return row, err
	}
	stop := s.load(ctx, "base")
	sleep(ctx, 6*time.Second)
	t := stop()
	if err := s.count(ctx, "base", m, t, &row); err != nil {
		return row, err
	}
	verdict(&row, false)
	return row, nil
}

// sigkill: SIGKILL the aggregator (both groups) under load, restart it at
// once, wait until it caught up, repeat.
func (s *Suite) sigkill(ctx context.Context) (Row, error) {
	row := Row{Fault: fmt.Sprintf("SIGKILL aggregator ×%d, restarted at once", s.cfg.Kills)}
	m, err := s.mark(ctx)
	if err != nil {
		return row, err
	}
	stop := s.load(ctx, "kill")
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	sleep(ctx, 3*time.Second)
	var recs []time.Duration
	for i := 0; i < s.cfg.Kills; i++ {
		start := time.Now()
		s.killAggregator(s.agg)
		if err := s.startAggregator(ctx); err != nil {
			return row, err
		}
		sleep(ctx, 500*time.Millisecond)
		if err := s.waitPast(ctx, 90*time.Second); err != nil {
			return row, fmt.Errorf("kill %d: %w", i+1, err)
		}
		recs = append(recs, time.Since(start))
		sleep(ctx, 1500*time.Millisecond)
	}
	t := stop()
	stop = nil
	if err := s.count(ctx, "kill", m, t, &row); err != nil {
		return row, err
	}
	row.Recovery = maxDur(recs)
	row.RecoveryNote = "kill → both groups applied all that was in Kafka 0.5 s after the restart; worst of " + strconv.Itoa(len(recs)) + ": " + durs(recs)
	verdict(&row, false)
	return row, nil
}

// malformed: a burst of bad messages mixed into the load.
func (s *Suite) malformed(ctx context.Context) (Row, error) {
	const bad = 1000
	row := Row{Fault: fmt.Sprintf("burst of %d malformed messages", bad)}
	m, err := s.mark(ctx)
	if err != nil {
		return row, err
	}
	stop := s.load(ctx, "junk")
	sleep(ctx, 2*time.Second)
	w := &kafka.Writer{Addr: kafka.TCP(s.brokers...), Topic: s.topic, Balancer: &kafka.Hash{}, BatchTimeout: 5 * time.Millisecond, RequiredAcks: kafka.RequireAll}
	msgs := make([]kafka.Message, 0, bad)
	now := time.Now().UnixMilli()
	for i := 0; i < bad; i++ {
		var k, v string
		switch i % 5 {
		case 0: // not JSON
			k, v = "ip:bad-"+strconv.Itoa(i), "this is not json "+strconv.Itoa(i)
		case 1: // missing id
			k, v = "ip:bad-x", fmt.Sprintf(`{"v":1,"action":%q,"kind":"ip","subject":"bad-x","ts":%d}`, s.act, now)
		case 2: // key does not match the value
			k, v = "ip:someone-else", fmt.Sprintf(`{"v":1,"id":"j%d","action":%q,"kind":"ip","subject":"bad-y","ts":%d}`, i, s.act, now)
		case 3: // far in the future
			k, v = "ip:bad-z", fmt.Sprintf(`{"v":1,"id":"j%d","action":%q,"kind":"ip","subject":"bad-z","ts":%d}`, i, s.act, now+3_600_000)
		default: // bad version and n
			k, v = "ip:bad-w", fmt.Sprintf(`{"v":9,"id":"j%d","action":%q,"kind":"ip","subject":"bad-w","ts":%d,"n":-4}`, i, s.act, now)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(k), Value: []byte(v)})
	}
	start := time.Now()
	werr := w.WriteMessages(ctx, msgs...)
	_ = w.Close()
	if werr != nil {
		stop()
		return row, fmt.Errorf("write malformed burst: %w", werr)
	}
	if err := s.waitPast(ctx, 60*time.Second); err != nil {
		stop()
		return row, err
	}
	row.Recovery = time.Since(start)
	row.RecoveryNote = "burst acknowledged → both groups past it"
	sleep(ctx, 2*time.Second)
	t := stop()
	if err := s.count(ctx, "junk", m, t, &row); err != nil {
		return row, err
	}
	verdict(&row, false)
	if row.DeadLettered != bad {
		row.Pass = false
	}
	row.Note = fmt.Sprintf("%d of %d malformed messages in the DLQ", row.DeadLettered, bad)
	return row, nil
}

// badRules: push a rules file with a syntax error to the running process,
// SIGHUP it, and check that it refused the file, kept its last good rules
// (a deny probe still denies) and kept counting.
func (s *Suite) badRules(ctx context.Context) (Row, error) {
	row := Row{Fault: "rules file with a syntax error, SIGHUP"}
	m, err := s.mark(ctx)
	if err != nil {
		return row, err
	}
	stop := s.load(ctx, "rules")
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	sleep(ctx, 2*time.Second)
	before, err := promtext.Scrape(ctx, s.mets)
	if err != nil {
		return row, err
	}
	badYAML := strings.Replace(string(s.good), "limits: [3/m]", "limits: [3/m\n    oops: {", 1)
	if _, err := rules.Parse([]byte(badYAML)); err == nil {
		return row, fmt.Errorf("the broken rules file parses")
	}
	start := time.Now()
	if err := os.WriteFile(s.rules, []byte(badYAML), 0o644); err != nil {
		return row, err
	}
	if err := s.agg.Signal(syscall.SIGHUP); err != nil {
		return row, err
	}
	// The watcher reports the refusal in floodgate_rules_reloads_total.
	var after promtext.Sample
	errKey := `result="error"`
	for time.Since(start) < 10*time.Second {
		sleep(ctx, 200*time.Millisecond)
		if after, err = promtext.Scrape(ctx, s.mets); err == nil &&
			after.Sum("floodgate_rules_reloads_total", errKey) > before.Sum("floodgate_rules_reloads_total", errKey) {
			break
		}
	}
	refused := after != nil && after.Sum("floodgate_rules_reloads_total", errKey) > before.Sum("floodgate_rules_reloads_total", errKey)
	loaded := after.Sum("floodgate_rules_loaded")
	// The deny rule (3/m) must still deny: 5 events for a fresh subject.
	probe := "probe-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	evs := make([]event.Event, 5)
	for i := range evs {
		evs[i] = event.Event{V: 1, ID: event.NewID(), Action: s.deny, Kind: "ip", Subject: probe, TS: time.Now(), N: 1}
	}
	if err := s.pub.Publish(ctx, evs...); err != nil {
		return row, err
	}
	denied := false
	var took time.Duration
	for time.Since(start) < 20*time.Second {
		st, err := s.store.Check(ctx, time.Now(), []window.Query{{Subject: window.Subject{Action: s.deny, Kind: "ip", Subject: probe}, Windows: []time.Duration{time.Minute}}})
		if err == nil && st[0].Deny != nil {
			denied = true
			took = time.Since(start)
			break
		}
		sleep(ctx, 20*time.Millisecond)
	}
	alive := s.agg.Alive()
	logMentions := strings.Contains(strings.ToLower(childproc.TailFile(s.agg.LogPath, 200)), "rules")
	// Restore the good file (and make the process load it again).
	if err := os.WriteFile(s.rules, s.good, 0o644); err != nil {
		return row, err
	}
	_ = s.agg.Signal(syscall.SIGHUP)
	t := stop()
	stop = nil
	if err := s.count(ctx, "rules", m, t, &row); err != nil {
		return row, err
	}
	row.Recovery = took
	row.RecoveryNote = "no outage; time until the deny probe was denied under the last good rules"
	row.Note = fmt.Sprintf("reload refused (metric): %v; rules still loaded: %.0f; deny probe denied: %v; process alive: %v; log mentions rules: %v",
		refused, loaded, denied, alive, logMentions)
	verdict(&row, false)
	row.Pass = row.Pass && refused && denied && alive && loaded == 2
	return row, nil
}

// postgresRestart: stop PostgreSQL under load for a few seconds.
func (s *Suite) postgresRestart(ctx context.Context) (Row, error) {
	const down = 8 * time.Second
	row := Row{Fault: fmt.Sprintf("PostgreSQL stopped %s, started", down)}
	return s.serviceFault(ctx, row, "pg", func() error {
		if err := s.stack(ctx, "stop", "postgres"); err != nil {
			return err
		}
		sleep(ctx, down)
		return s.stack(ctx, "start", "postgres")
	}, false)
}

// kafkaRestart: restart the broker under load.
func (s *Suite) kafkaRestart(ctx context.Context) (Row, error) {
	row := Row{Fault: "Kafka broker restart (scripts/stack restart-service kafka)"}
	return s.serviceFault(ctx, row, "kafka", func() error {
		return s.stack(ctx, "restart-service", "kafka")
	}, false)
}

func (s *Suite) serviceFault(ctx context.Context, row Row, scenario string, fault func() error, redisMayLose bool) (Row, error) {
	m, err := s.mark(ctx)
	if err != nil {
		return row, err
	}
	stop := s.load(ctx, scenario)
	sleep(ctx, 3*time.Second)
	start := time.Now()
	ferr := fault()
	back := time.Since(start)
	if ferr != nil {
		stop()
		return row, ferr
	}
	sleep(ctx, 500*time.Millisecond)
	if err := s.waitPast(ctx, 180*time.Second); err != nil {
		stop()
		return row, err
	}
	row.Recovery = time.Since(start)
	row.RecoveryNote = fmt.Sprintf("fault start → both groups applied all that was in Kafka 0.5 s after the service was back (back after %s)", back.Round(100*time.Millisecond))
	sleep(ctx, 2*time.Second)
	t := stop()
	for _, p := range append([]*childproc.Proc(nil), s.aggs...) {
		if !p.Alive() {
			row.Note += "aggregator exited: " + p.Tail(3) + ". "
			s.killAggregator(p)
			if err := s.startAggregator(ctx); err != nil {
				return row, err
			}
		}
	}
	if err := s.count(ctx, scenario, m, t, &row); err != nil {
		return row, err
	}
	if t.Failed > 0 && row.Note == "" {
		row.Note = fmt.Sprintf("%d events in failed Publish calls (in doubt); the truth is the topic", t.Failed)
	}
	verdict(&row, redisMayLose)
	return row, nil
}

// redisRestart: restart Redis under load (no persistence: every counter,
// deny record and offset is gone). The running aggregator finds each
// partition's slot gone and counts it again from Kafka, the longest
// window back (consume.Recounter): no rebuild, nothing lost, in this
// scenario or any earlier one.
func (s *Suite) redisRestart(ctx context.Context) (Row, error) {
	row := Row{Fault: "Redis restart (counters lost), counted again from Kafka by the running aggregator"}
	row, err := s.serviceFault(ctx, row, "redis", func() error {
		return s.stack(ctx, "restart-service", "redis")
	}, false)
	if err != nil {
		return row, err
	}
	m, err := promtext.Scrape(ctx, s.mets)
	if err != nil {
		return row, err
	}
	recounts := m.Sum("floodgate_aggregator_recounts_total", `group="`+s.live+`"`)
	// Re-count every earlier scenario in Redis: the recount brought them
	// back too.
	m0 := mark{start: map[int]int64{}}
	others := ""
	for _, sc := range []string{"base", "kill", "junk", "rules", "pg", "kafka", "apply", "publish", "rebuild"} {
		var r Row
		if err := s.count(ctx, sc, m0, nil, &r); err != nil {
			return row, err
		}
		if r.InTopic > 0 {
			others += fmt.Sprintf(" %s %d/%d", sc, r.Redis, r.InTopic)
			if r.LostRedis != 0 || r.DupRedis != 0 {
				row.Pass = false
			}
		}
	}
	row.RecoveryNote += fmt.Sprintf("; partitions counted again from Kafka: %v", recounts)
	row.Note = strings.TrimSpace(row.Note + " Redis/topic per earlier scenario after the recount:" + others)
	row.Pass = row.Pass && recounts > 0
	return row, nil
}

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func durs(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.Round(100 * time.Millisecond).String()
	}
	return strings.Join(parts, ", ")
}
