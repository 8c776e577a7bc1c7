package consume_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/topics"
)

// ipEvents encodes n events of one IP at ts.
func ipEvents(t *testing.T, ip string, n int, ts time.Time) []kafka.Message {
	t.Helper()
	var msgs []kafka.Message
	for range n {
		ev := event.Event{ID: event.NewID(), Action: "login_failed", Kind: "ip", Subject: ip, TS: ts, N: 1}
		v, err := event.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(ev.Key()), Value: v})
	}
	return msgs
}

// produceGzip writes one record of size bytes (small on the wire: it
// compresses well) in a gzip batch of its own.
func produceGzip(t *testing.T, ctx context.Context, brokers []string, topic string, key string, size int) []byte {
	t.Helper()
	value := bytes.Repeat([]byte("A"), size)
	copy(value, `{"v":1,"pad":"`)
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Compression: kafka.Gzip, BatchBytes: 64 << 20,
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(key), Value: value}); err != nil {
		t.Fatalf("produce a %d-byte gzip record: %v", size, err)
	}
	return value
}

func produce(t *testing.T, ctx context.Context, brokers []string, topic string, msgs []kafka.Message) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// sumMetric sums the series of a counter or a gauge in reg.
func sumMetric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

func dlqHeaders(m kafka.Message) map[string]string {
	h := map[string]string{}
	for _, x := range m.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

// TestGroupGoesOnPastOversizedAndBombRecords: a record over the contract's
// size but small on the wire (3 MiB of gzip) goes to the DLQ as a stub, a
// gzip bomb past the decompression bound is skipped unread, and the events
// of the same partition behind each are counted; an event a few seconds
// ahead of the clock is counted at the clock's time.
func TestGroupGoesOnPastOversizedAndBombRecords(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 1)
	dlqTopic := stacktest.Topic(t, bs, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	now := time.Now()

	big := produceGzip(t, ctx, bs, topic, "ip:192.0.2.9", 3<<20)
	produce(t, ctx, bs, topic, ipEvents(t, "192.0.2.9", 3, now))
	produceGzip(t, ctx, bs, topic, "ip:192.0.2.9", consume.MaxBatchDecompressed+(4<<20))
	produce(t, ctx, bs, topic, ipEvents(t, "192.0.2.9", 2, now.Add(6*time.Second)))

	dlq := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: dlqTopic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer dlq.Close()
	sink := newOffsetSink()
	reg := prometheus.NewRegistry()
	g, err := consume.NewGroup(consume.Config{Brokers: bs, Topic: topic, GroupID: "test-" + topic, DeadLetter: dlq, Registerer: reg}, sink)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	// 1 + 3 + 1 + 2 records: the sink stands past all of them.
	stacktest.WaitFor(t, "the partition applied past both bad records", time.Minute, func() bool {
		next, _, _ := sink.Resume(ctx, topic, 0)
		return next == 7
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := sink.count(); n != 5 {
		t.Fatalf("%d events counted, want the 5 behind the bad records", n)
	}
	for _, r := range sink.applied[0] {
		if r.Event.TS.After(time.Now()) {
			t.Errorf("event at offset %d counted at %s, ahead of the clock", r.Offset, r.Event.TS)
		}
	}
	if got := sumMetric(t, reg, "floodgate_aggregator_clamped_total"); got != 2 {
		t.Errorf("clamped_total = %v, want 2", got)
	}
	if got := sumMetric(t, reg, "floodgate_aggregator_unreadable_offsets_total"); got != 1 {
		t.Errorf("unreadable_offsets_total = %v, want 1", got)
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: bs, Topic: dlqTopic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	stub, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := dlqHeaders(stub)
	sum := sha256.Sum256(big)
	size := len(stub.Key) + len(stub.Value)
	for k, v := range h {
		size += len(k) + len(v)
	}
	if h[consume.HeaderDLQReason] != event.ReasonTooLarge || h[consume.HeaderDLQOffset] != "0" ||
		h[consume.HeaderDLQSize] != strconv.Itoa(len(big)) || h[consume.HeaderDLQSHA256] != hex.EncodeToString(sum[:]) ||
		!bytes.Equal(stub.Value, big[:1024]) || size > 4<<10 {
		t.Errorf("stub of the oversized record: %d bytes, value %q..., headers %v", size, stub.Value[:min(len(stub.Value), 20)], h)
	}
	bomb, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h = dlqHeaders(bomb)
	if h[consume.HeaderDLQReason] != consume.ReasonUnreadable || h[consume.HeaderDLQOffset] != "4" || h[consume.HeaderDLQOffsetEnd] != "4" || len(bomb.Value) != 0 {
		t.Errorf("stub of the bomb: headers %v, %d value bytes", h, len(bomb.Value))
	}
}

// TestGroupDropsDeadLettersTheDLQRefuses: a DLQ whose max.message.bytes is
// below even a stub refuses it for good; the partition drops it (ERROR log,
// dead_letter_dropped_total) and goes on instead of retrying forever.
func TestGroupDropsDeadLettersTheDLQRefuses(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dlqTopic := fmt.Sprintf("fgtest.tinydlq-%d", time.Now().UnixNano())
	if _, err := topics.Ensure(ctx, bs, topics.Spec{Name: dlqTopic, Partitions: 1, Configs: map[string]string{"max.message.bytes": "600"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := topics.Delete(ctx, bs, dlqTopic); err != nil {
			t.Logf("delete %s: %v", dlqTopic, err)
		}
	})
	produce(t, ctx, bs, topic, []kafka.Message{{Key: []byte("ip:192.0.2.10"), Value: []byte(`{"v":1,"pad":"` + strings.Repeat("B", 8<<10) + `"}`)}})
	produce(t, ctx, bs, topic, ipEvents(t, "192.0.2.10", 2, time.Now()))

	dlq := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: dlqTopic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer dlq.Close()
	sink := newOffsetSink()
	reg := prometheus.NewRegistry()
	g, err := consume.NewGroup(consume.Config{Brokers: bs, Topic: topic, GroupID: "test-" + topic, DeadLetter: dlq, Registerer: reg}, sink)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	stacktest.WaitFor(t, "the partition applied past the refused dead letter", time.Minute, func() bool {
		next, _, _ := sink.Resume(ctx, topic, 0)
		return next == 3
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := sink.count(); n != 2 {
		t.Fatalf("%d events counted, want 2", n)
	}
	if got := sumMetric(t, reg, "floodgate_aggregator_dead_letter_dropped_total"); got != 1 {
		t.Errorf("dead_letter_dropped_total = %v, want 1", got)
	}
}

// A sink that holds no offset for a partition the group committed progress
// on lost its store's data: the partition resumes at the commit, reported
// (ERROR log, floodgate_aggregator_sink_offset_missing_total), not taken
// for a new partition.
func TestGroupReportsASinkThatLostItsOffsets(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	produce(t, ctx, bs, topic, ipEvents(t, "192.0.2.11", 3, time.Now()))
	run := func(sink *offsetSink, reg *prometheus.Registry, until func() bool) {
		t.Helper()
		runGroupUntil(t, ctx, consume.Config{Brokers: bs, Topic: topic, GroupID: "test-" + topic, Registerer: reg}, sink, until)
	}
	first := newOffsetSink()
	run(first, prometheus.NewRegistry(), func() bool { return first.count() == 3 })
	// The group committed 3 when it stopped; a sink that lost everything.
	produce(t, ctx, bs, topic, ipEvents(t, "192.0.2.11", 1, time.Now()))
	lost := newOffsetSink()
	reg := prometheus.NewRegistry()
	run(lost, reg, func() bool { return lost.count() == 1 })
	if got := sumMetric(t, reg, "floodgate_aggregator_sink_offset_missing_total"); got != 1 {
		t.Errorf("sink_offset_missing_total = %v, want 1", got)
	}
}

// recountSink is an offsetSink that keeps only the last hour, as the live
// windows do, and asks to be counted again from the log when it loses its
// store (consume.Recounter).
type recountSink struct {
	*offsetSink
	loseAt   int64      // the batch holding this offset finds the store lost, once; -1 never
	recounts [][2]int64 // {from, to} of each Recount
}

func (s *recountSink) RecountSince() time.Duration { return time.Hour }

func (s *recountSink) Recount(_ context.Context, _ string, _ int, from, to int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recounts = append(s.recounts, [2]int64{from, to})
	return nil
}

func (s *recountSink) Apply(ctx context.Context, b consume.Batch) error {
	s.mu.Lock()
	if s.loseAt >= 0 && b.First <= s.loseAt && s.loseAt <= b.Last {
		s.loseAt = -1
		s.applied, s.seen, s.next = map[int][]consume.Record{}, map[string]int{}, map[int]int64{}
		s.mu.Unlock()
		return &consume.RewindError{Topic: b.Topic, Partition: b.Partition, First: b.First, Recount: true, Reason: "lost"}
	}
	s.mu.Unlock()
	return s.offsetSink.Apply(ctx, b)
}

func (s *recountSink) offsets() (out []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.applied[0] {
		out = append(out, r.Offset)
	}
	return out
}

// A sink whose store lost a partition, found as it starts (the group has
// committed progress, the sink holds no offset) or as it applies, is read
// again from the first offset written RecountSince ago: what it lost
// within its windows is counted again, nothing older, and the sink learns
// the partition's end at the loss.
func TestGroupRecountsASinkThatLostItsStore(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	old, recent := time.Now().Add(-2*time.Hour), time.Now()
	msgs := ipEvents(t, "192.0.2.12", 3, old)
	for i := range msgs {
		msgs[i].Time = old // the log's time, which the recount's start is found by
	}
	msgs = append(msgs, ipEvents(t, "192.0.2.12", 3, recent)...)
	msgs = append(msgs, kafka.Message{Key: []byte("ip:192.0.2.12"), Value: []byte("{not json")})
	produce(t, ctx, bs, topic, msgs) // offsets 0..6, 6 malformed
	dlq := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: stacktest.Topic(t, bs, 1), RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer dlq.Close()
	run := func(sink consume.Sink, reg *prometheus.Registry, until func() bool) {
		t.Helper()
		runGroupUntil(t, ctx, consume.Config{Brokers: bs, Topic: topic, GroupID: "test-" + topic, DeadLetter: dlq, Registerer: reg}, sink, until)
	}
	first := newOffsetSink()
	run(first, prometheus.NewRegistry(), func() bool { return first.count() == 6 })

	// Lost before the start: the group committed 7.
	produce(t, ctx, bs, topic, ipEvents(t, "192.0.2.12", 1, recent)) // offset 7
	lost := &recountSink{offsetSink: newOffsetSink(), loseAt: -1}
	reg := prometheus.NewRegistry()
	run(lost, reg, func() bool { return lost.count() == 4 })
	if got, want := fmt.Sprint(lost.offsets()), "[3 4 5 7]"; got != want {
		t.Errorf("recounted offsets %s, want %s (the last hour's, then what followed)", got, want)
	}
	if got, want := fmt.Sprint(lost.recounts), "[[3 8]]"; got != want {
		t.Errorf("Recount calls %s, want %s", got, want)
	}
	if got := sumMetric(t, reg, "floodgate_aggregator_recounts_total"); got != 1 {
		t.Errorf("recounts_total = %v, want 1", got)
	}
	if got := sumMetric(t, reg, "floodgate_aggregator_recounted_offsets_total"); got != 4 {
		t.Errorf("recounted_offsets_total = %v, want 4 (3..6)", got)
	}
	if got := sumMetric(t, reg, "floodgate_aggregator_dead_lettered_total"); got != 0 {
		t.Errorf("dead_lettered_total = %v in the recount, want 0: offset 6 was dead-lettered when first read", got)
	}

	// Lost while it applies: the batch holding offset 8 finds it gone.
	produce(t, ctx, bs, topic, ipEvents(t, "192.0.2.12", 2, recent)) // offsets 8, 9
	lost.loseAt = 8
	reg = prometheus.NewRegistry()
	run(lost, reg, func() bool { return lost.count() == 6 })
	if got, want := fmt.Sprint(lost.offsets()), "[3 4 5 7 8 9]"; got != want {
		t.Errorf("recounted offsets %s, want %s", got, want)
	}
	if got := len(lost.recounts); got != 2 || lost.recounts[1] != [2]int64{3, 10} {
		t.Errorf("Recount calls %v, want a second of [3 10]", lost.recounts)
	}
	if got := sumMetric(t, reg, "floodgate_aggregator_dead_lettered_total"); got != 0 {
		t.Errorf("dead_lettered_total = %v in the second recount, want 0", got)
	}
}

// runGroupUntil runs a group of cfg over sink until until holds, then
// stops it.
func runGroupUntil(t *testing.T, ctx context.Context, cfg consume.Config, sink consume.Sink, until func() bool) {
	t.Helper()
	g, err := consume.NewGroup(cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	stacktest.WaitFor(t, "the partition applied", time.Minute, until)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// spanSink is an offsetSink that keeps the offsets each batch spans.
type spanSink struct {
	*offsetSink
	spans [][2]int64
}

func (s *spanSink) Apply(ctx context.Context, b consume.Batch) error {
	s.mu.Lock()
	s.spans = append(s.spans, [2]int64{b.First, b.Last})
	s.mu.Unlock()
	return s.offsetSink.Apply(ctx, b)
}

// TestGroupAppliesAFetchOfBombsInBoundedBatches: thirty records of 7.5
// MiB, each a zstd batch of a few hundred bytes, then events, all in one
// partition before the group starts. The group's first fetch used to hold
// every record (one 1 MiB response), and its first batch took them all.
// Now a fetch holds at most the read-ahead bound (two of them), and a
// batch gathers fetches only until it holds that bound: no batch spans
// more than four. Every record is dead-lettered (as a stub), and the
// events behind them are counted.
func TestGroupAppliesAFetchOfBombsInBoundedBatches(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 1)
	dlqTopic := stacktest.Topic(t, bs, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const bombs, size = 30, 15 << 19
	produceBombs(t, ctx, bs, topic, bombs, size)
	produce(t, ctx, bs, topic, ipEvents(t, "192.0.2.9", 3, time.Now()))

	dlq := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: dlqTopic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer dlq.Close()
	sink := &spanSink{offsetSink: newOffsetSink()}
	reg := prometheus.NewRegistry()
	runGroupUntil(t, ctx, consume.Config{Brokers: bs, Topic: topic, GroupID: "test-" + topic, DeadLetter: dlq, Registerer: reg}, sink, func() bool {
		next, _, _ := sink.Resume(ctx, topic, 0)
		return next == bombs+3
	})
	if n := sink.count(); n != 3 {
		t.Errorf("%d events counted, want the 3 behind the records", n)
	}
	if got := sumMetric(t, reg, "floodgate_aggregator_dead_lettered_total"); got != bombs {
		t.Errorf("dead_lettered_total = %v, want %d", got, bombs)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, sp := range sink.spans {
		if n := min(sp[1], bombs-1) - sp[0] + 1; n > 4 {
			t.Errorf("a batch spans %d of the records (offsets %d..%d): more than the read-ahead bound twice", n, sp[0], sp[1])
		}
	}
	t.Logf("batches %v; fetches cut by the budget: %v", sink.spans, sumMetric(t, reg, "floodgate_aggregator_fetch_cuts_total"))
}
