package consume_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// offsetSink is an in-memory sink with the same compare-and-set on offsets
// that the real sinks implement, so the test sees exactly what the runner
// delivers and can tell a redelivery from a double count.
type offsetSink struct {
	mu      sync.Mutex
	next    map[int]int64
	seen    map[string]int // event id -> times applied
	applied map[int][]consume.Record
	batches int
	replays int
}

func newOffsetSink() *offsetSink {
	return &offsetSink{next: map[int]int64{}, seen: map[string]int{}, applied: map[int][]consume.Record{}}
}

// lose makes the sink forget what it applied of partition p from offset
// to on, offset included, as a store that fails over to a replica missing
// its last writes does.
func (s *offsetSink) lose(p int, to int64) (lost int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.applied[p][:0]
	for _, r := range s.applied[p] {
		if r.Offset >= to {
			s.seen[r.Event.ID]--
			if s.seen[r.Event.ID] == 0 {
				delete(s.seen, r.Event.ID)
			}
			lost++
			continue
		}
		kept = append(kept, r)
	}
	s.applied[p] = kept
	s.next[p] = to
	return lost
}

func (s *offsetSink) Resume(_ context.Context, _ string, p int) (int64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.next[p]
	return n, ok, nil
}

func (s *offsetSink) Apply(_ context.Context, b consume.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.next[b.Partition]; ok && b.First < n {
		s.replays++
		return nil
	}
	if n, ok := s.next[b.Partition]; ok && b.First != n {
		return &consume.RewindError{Topic: b.Topic, Partition: b.Partition, Next: n, First: b.First}
	}
	for _, r := range b.Records {
		s.seen[r.Event.ID]++
	}
	s.applied[b.Partition] = append(s.applied[b.Partition], b.Records...)
	s.next[b.Partition] = b.Next()
	s.batches++
	return nil
}

func (s *offsetSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func TestGroupDeliversEveryEventOnceAndDeadLettersPoison(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 4)
	dlqTopic := stacktest.Topic(t, bs, 1)
	now := time.Now()

	w := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: topic, Balancer: &kafka.Murmur2Balancer{}, BatchTimeout: 5 * time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	const valid = 2000
	var msgs []kafka.Message
	for i := range valid {
		ev := event.Event{ID: "ev-" + strconv.Itoa(i), Action: "visit", Kind: "link", Subject: "l" + strconv.Itoa(i%37), TS: now, N: 1}
		v, err := event.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(ev.Key()), Value: v})
		if i%250 == 0 { // poison, spread between valid events
			msgs = append(msgs,
				kafka.Message{Key: []byte("link:x"), Value: []byte("{not json")},
				kafka.Message{Key: []byte("link:x"), Value: []byte(`{"v":1,"id":"a","action":"visit","kind":"link","subject":"x"}`)},
			)
		}
	}
	// Wrong key, and too far in the future: valid JSON, refused by the runner.
	future, _ := event.Encode(event.Event{ID: "future", Action: "visit", Kind: "link", Subject: "f", TS: now.Add(time.Hour)})
	mismatch, _ := event.Encode(event.Event{ID: "mismatch", Action: "visit", Kind: "link", Subject: "m", TS: now})
	msgs = append(msgs,
		kafka.Message{Key: []byte("link:f"), Value: future},
		kafka.Message{Key: []byte("link:other"), Value: mismatch})
	const poison = 2*8 + 2
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce: %v", err)
	}

	dlq := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: dlqTopic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer dlq.Close()
	sink := newOffsetSink()
	// Commits are due only when the group stops: the final one must carry
	// every partition's progress.
	g, err := consume.NewGroup(consume.Config{
		Brokers: bs, Topic: topic, GroupID: "test-" + topic, DeadLetter: dlq, CommitInterval: time.Hour,
	}, sink)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()

	for sink.count() < valid && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if got := sink.count(); got != valid {
		t.Fatalf("applied %d distinct events, want %d", got, valid)
	}
	for id, n := range sink.seen {
		if n != 1 {
			t.Errorf("event %s applied %d times", id, n)
		}
	}
	client := &kafka.Client{Addr: kafka.TCP(bs...)}
	res, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: "test-" + topic, Topics: map[string][]int{topic: {0, 1, 2, 3}}})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		t.Fatalf("committed offsets: %v", err)
	}
	for _, po := range res.Topics[topic] {
		if want := sink.next[po.Partition]; po.CommittedOffset != want {
			t.Errorf("partition %d: committed offset %d, want the sink's %d", po.Partition, po.CommittedOffset, want)
		}
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: bs, Topic: dlqTopic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	reasons := map[string]int{}
	for range poison {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read dlq after %v: %v", reasons, err)
		}
		h := map[string]string{}
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		if h[consume.HeaderDLQTopic] != topic || h[consume.HeaderDLQOffset] == "" || h[consume.HeaderDLQDetail] == "" {
			t.Errorf("dead letter lacks its source or detail: %v", h)
		}
		reasons[h[consume.HeaderDLQReason]]++
	}
	t.Logf("dead letters by reason: %v", reasons)
	if reasons[consume.ReasonFutureTimestamp] != 1 || reasons[consume.ReasonKeyMismatch] != 1 {
		t.Errorf("want one future_timestamp and one key_mismatch, got %v", reasons)
	}
}

// writeVisits writes visit events from..to-1 with ids prefix-i over
// subjects s0..s(subjects-1).
func writeVisits(ctx context.Context, t *testing.T, w *kafka.Writer, prefix string, subjects, from, to int) {
	t.Helper()
	var msgs []kafka.Message
	for i := from; i < to; i++ {
		ev := event.Event{ID: prefix + "-" + strconv.Itoa(i), Action: "visit", Kind: "link", Subject: "s" + strconv.Itoa(i%subjects), TS: time.Now()}
		v, err := event.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(ev.Key()), Value: v})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

// TestGroupResumesFromSinkOffset restarts a group over the same sink: the
// second run starts where the sink stands, so nothing is applied twice even
// though the first run's Kafka commits are advisory.
func TestGroupResumesFromSinkOffset(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 2)
	w := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: topic, Balancer: &kafka.Murmur2Balancer{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	produce := func(from, to int) { writeVisits(ctx, t, w, "r", 5, from, to) }
	sink := newOffsetSink()
	run := func(want int) {
		// A new group id each time: no committed offsets, so only the sink's
		// offsets can keep the second run from starting at the beginning.
		g, err := consume.NewGroup(consume.Config{Brokers: bs, Topic: topic, GroupID: fmt.Sprintf("resume-%d-%s", want, topic)}, sink)
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- g.Run(rctx) }()
		for sink.count() < want && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	produce(0, 300)
	run(300)
	produce(300, 600)
	run(600)
	for id, n := range sink.seen {
		if n != 1 {
			t.Errorf("event %s applied %d times", id, n)
		}
	}
	if sink.count() != 600 {
		t.Fatalf("applied %d, want 600", sink.count())
	}
	if sink.replays != 0 {
		t.Errorf("%d batches were redelivered below the sink offset", sink.replays)
	}
}

// TestGroupRewindsWhenTheSinkLostBatches makes the sink lose its last
// batches of each partition while the group runs, as a Redis primary that
// dies before replicating them does (its offset and its counts roll back
// together): the next batch finds the sink's offset behind it, and the
// partition is read again from there, so every event ends applied once.
func TestGroupRewindsWhenTheSinkLostBatches(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 2)
	w := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: topic, Balancer: &kafka.Murmur2Balancer{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	produce := func(from, to int) { writeVisits(ctx, t, w, "w", 7, from, to) }
	sink := newOffsetSink()
	waitCount := func(want int) {
		for sink.count() < want && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	reg, stop := startGroup(ctx, t, bs, topic, "rewind-"+topic, sink)

	produce(0, 400)
	waitCount(400)
	lost := 0
	for p := range 2 {
		sink.mu.Lock()
		to := sink.next[p] / 2
		sink.mu.Unlock()
		lost += sink.lose(p, to)
	}
	t.Logf("the sink lost %d applied events", lost)
	produce(400, 600)
	waitCount(600)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := sink.count(); got != 600 {
		t.Fatalf("applied %d distinct events, want 600", got)
	}
	for id, n := range sink.seen {
		if n != 1 {
			t.Errorf("event %s applied %d times", id, n)
		}
	}
	rewinds := 0.0
	for _, n := range counterByPartition(t, reg, "floodgate_aggregator_rewinds_total") {
		rewinds += n
	}
	if rewinds != 2 {
		t.Errorf("floodgate_aggregator_rewinds_total = %v, want 2 (one per partition)", rewinds)
	}
}

func TestGroupMissingTopicIsAClearError(t *testing.T) {
	bs := stacktest.Brokers(t)
	g, err := consume.NewGroup(consume.Config{Brokers: bs, Topic: "no.such.topic." + strconv.FormatInt(time.Now().UnixNano(), 36), GroupID: "missing"}, newOffsetSink())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = g.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Run on a missing topic: %v, want a 'does not exist' error", err)
	}
}

// A stop that comes while the group still checks its topic is a clean
// stop, as one at any later moment is: the process exits 0.
func TestGroupStoppedWhileStartingIsClean(t *testing.T) {
	bs := stacktest.Brokers(t)
	g, err := consume.NewGroup(consume.Config{Brokers: bs, Topic: "floodgate.events", GroupID: "stopped-at-start"}, newOffsetSink())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Run(ctx); err != nil {
		t.Fatalf("Run stopped before it began: %v, want nil", err)
	}
}

// TestGroupIdleMembersDoNotStorm runs three members over one partition: two
// get nothing and must wait quietly for the next rebalance. Any function
// given to Generation.Start that returns ends the generation for the whole
// group, so an idle member or a worker that gave up would rebalance every
// member in a loop; this guards that the group settles in one generation.
func TestGroupIdleMembersDoNotStorm(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sink := newOffsetSink()
	var regs []*prometheus.Registry
	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	// The broker's least session timeout: members heartbeat every fifth
	// of it, and a storm turns at that pace.
	const session = 6 * time.Second
	for range 3 {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		g, err := consume.NewGroup(consume.Config{Brokers: bs, Topic: topic, GroupID: "idle-" + topic, Registerer: reg,
			SessionTimeout: session}, sink)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.Run(runCtx); err != nil {
				t.Errorf("run: %v", err)
			}
		}()
	}
	// acks=all: kafka-go's default (none) lets the broker drop a write
	// silently, and the wait below would then run out the test's minute.
	w := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: topic, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	// produce writes events [from, to) one request each and waits until
	// the sink holds them: each is a round trip through the generation in
	// force, so a storm (a generation ended by a returning member, every
	// member rejoining) shows as generations joined meanwhile.
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			ev := event.Event{ID: "idle-" + strconv.Itoa(i), Action: "visit", Kind: "link", Subject: "x", TS: time.Now()}
			v, _ := event.Encode(ev)
			if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(ev.Key()), Value: v}); err != nil {
				t.Fatal(err)
			}
			for sink.count() < i+1 && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	generations := func() []float64 {
		out := make([]float64, len(regs))
		for i, reg := range regs {
			out[i] = sumMetric(t, reg, "floodgate_aggregator_generations_total")
		}
		return out
	}
	produce(0, 50)
	// Settled: every member joined, and the coordinator says the group is
	// stable with all three.
	client := &kafka.Client{Addr: kafka.TCP(bs...)}
	for {
		res, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{"idle-" + topic}})
		if err != nil {
			t.Fatal(err)
		}
		g := res.Groups[0]
		joined := true
		for _, n := range generations() {
			joined = joined && n > 0
		}
		if joined && g.GroupState == "Stable" && len(g.Members) == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("group not stable with 3 members: state %s, %d members, generations %v", g.GroupState, len(g.Members), generations())
		}
		time.Sleep(50 * time.Millisecond)
	}
	before := generations()
	produce(50, 100)
	// The absence of a storm shows only over time: members that end their
	// generations rejoin at the pace of their heartbeats. Watch the
	// counters of the settled group for three heartbeat intervals; any
	// member joining a generation meanwhile, with nobody joining or
	// leaving, is the storm.
	watch := time.NewTimer(3 * session / 5)
	defer watch.Stop()
	after := generations()
	for slices.Equal(after, before) {
		select {
		case <-watch.C:
		case <-time.After(50 * time.Millisecond):
			after = generations()
			continue
		}
		break
	}
	stop()
	wg.Wait()
	for i := range regs {
		t.Logf("member %d joined %v generations (%v once settled)", i, after[i], before[i])
		if after[i] != before[i] || after[i] > 4 {
			t.Errorf("member %d joined generations %v, then %v in a settled group (nobody joined or left): a rebalance storm", i, before[i], after[i])
		}
	}
	if sink.count() != 100 {
		t.Fatalf("applied %d, want 100", sink.count())
	}
}

// TestGroupSkipsTransactionMarkers feeds the group a topic written in
// transactions by Kafka's own Java producer. kafka-go returns each commit
// marker as if it were a message; the group must skip them (not dead-letter
// them as garbage) and still cover their offsets. The payloads are random
// bytes, so exactly the 600 records, and nothing else, reach the DLQ.
func TestGroupSkipsTransactionMarkers(t *testing.T) {
	bs := stacktest.Brokers(t)
	cp := os.Getenv("FLOODGATE_KAFKA_CLASSPATH")
	if cp == "" {
		t.Fatal("FLOODGATE_KAFKA_CLASSPATH is not set: run under `eval \"$(scripts/stack env)\"` (make test does)")
	}
	topic := stacktest.Topic(t, bs, 2)
	dlqTopic := stacktest.Topic(t, bs, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const records = 600
	java := exec.CommandContext(ctx, "java", "-Xmx256m", "-cp", cp, "org.apache.kafka.tools.ProducerPerformance",
		"--topic", topic, "--num-records", strconv.Itoa(records), "--record-size", "40", "--throughput", "-1",
		"--transactional-id", "markers-"+topic, "--transaction-duration-ms", "20",
		"--producer-props", "bootstrap.servers="+strings.Join(bs, ","), "acks=all")
	if out, err := java.CombinedOutput(); err != nil {
		t.Fatalf("ProducerPerformance: %v\n%s", err, out)
	}
	end := map[int]int64{}
	var total int64
	for p := range 2 {
		conn, err := kafka.DialLeader(ctx, "tcp", bs[0], topic, p)
		if err != nil {
			t.Fatal(err)
		}
		last, err := conn.ReadLastOffset()
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		end[p] = last
		total += last
	}
	dlq := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: dlqTopic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer dlq.Close()
	sink := newOffsetSink()
	reg := prometheus.NewRegistry()
	g, err := consume.NewGroup(consume.Config{Brokers: bs, Topic: topic, GroupID: "markers-" + topic,
		DeadLetter: dlq, Registerer: reg}, sink)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	caughtUp := func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for p, e := range end {
			if sink.next[p] < e {
				return false
			}
		}
		return true
	}
	for !caughtUp() && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !caughtUp() {
		t.Fatalf("sink at %v, want the end offsets %v", sink.next, end)
	}
	markers := sumMetric(t, reg, "floodgate_aggregator_transaction_markers_total")
	if want := float64(total - records); markers != want {
		t.Errorf("skipped %v transaction markers, want %v (end offsets %v, %d records)", markers, want, end, records)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: bs, Topic: dlqTopic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	for i := range records {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("dead letter %d of %d: %v", i, records, err)
		}
		if len(m.Key) == 4 {
			t.Fatalf("a transaction marker was dead-lettered: key %x", m.Key)
		}
	}
	// Dead letters are written before their batch is applied, so with the
	// sink at the end the DLQ holds all it ever will.
	client := &kafka.Client{Addr: kafka.TCP(bs...)}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{dlqTopic: {kafka.LastOffsetOf(0)}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := res.Topics[dlqTopic][0].LastOffset; n != records {
		t.Fatalf("%d dead letters, want %d", n, records)
	}
	t.Logf("end offsets %v: %d records, %v markers skipped, %d dead letters", end, records, markers, records)
}

// rereadSink is an offsetSink that can ask for a partition to be read
// again (consume.Rereader), as the live sink does when a checkpoint
// drops its memory of it.
type rereadSink struct {
	*offsetSink
	ch [2]chan string
}

func (s *rereadSink) Rereads(p int) <-chan string { return s.ch[p] }

// A sink that drops what it applied of an idle partition and asks for it
// to be read again gets it read again without waiting for a new record.
func TestGroupRereadsAnIdlePartitionWhenTheSinkAsks(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 2)
	w := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: topic, Balancer: &kafka.Murmur2Balancer{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sink := &rereadSink{offsetSink: newOffsetSink(), ch: [2]chan string{make(chan string, 1), make(chan string, 1)}}
	waitCount := func(want int) {
		t.Helper()
		stacktest.WaitFor(t, fmt.Sprintf("%d distinct events applied", want), time.Minute, func() bool { return sink.count() >= want })
	}
	reg, stop := startGroup(ctx, t, bs, topic, "reread-"+topic, sink)

	writeVisits(ctx, t, w, "r", 7, 0, 400)
	waitCount(400)
	sink.mu.Lock()
	to := sink.next[0] / 2
	sink.mu.Unlock()
	lost := sink.lose(0, to)
	if lost == 0 {
		t.Fatal("partition 0 had nothing to lose")
	}
	sink.ch[0] <- "memory dropped by the test"
	waitCount(400) // nothing new produced: only a read again restores them
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for id, n := range sink.seen {
		if n != 1 {
			t.Errorf("event %s applied %d times", id, n)
		}
	}
	rebuilds := counterByPartition(t, reg, "floodgate_aggregator_memory_rebuilds_total")
	if rebuilds["0"] != 1 || rebuilds["1"] != 0 {
		t.Errorf("floodgate_aggregator_memory_rebuilds_total by partition %v, want 1 on partition 0 only", rebuilds)
	}
}

// startGroup runs a group of sink over topic; stop stops it and returns
// what its Run returned.
func startGroup(ctx context.Context, t *testing.T, bs []string, topic, id string, sink consume.Sink) (reg *prometheus.Registry, stop func() error) {
	t.Helper()
	reg = prometheus.NewRegistry()
	g, err := consume.NewGroup(consume.Config{Brokers: bs, Topic: topic, GroupID: id, Registerer: reg}, sink)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	return reg, func() error { cancel(); return <-done }
}

// counterByPartition is a counter of reg summed by its partition label.
func counterByPartition(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "partition" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
