package consume_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// gateSink is an offsetSink whose Apply waits until open is closed: a sink
// stalled on its store, while the partition's backlog waits in Kafka.
type gateSink struct {
	*offsetSink
	entered chan struct{} // closed at the first Apply
	open    chan struct{}
	opened  sync.Once
	first   bool
}

// release lets Apply go on, once.
func (s *gateSink) release() { s.opened.Do(func() { close(s.open) }) }

func (s *gateSink) Apply(ctx context.Context, b consume.Batch) error {
	if !s.first {
		s.first = true
		close(s.entered)
	}
	<-s.open
	return s.offsetSink.Apply(ctx, b)
}

// TestGroupBoundsReadAhead: while the sink is stalled, the fetch loop
// waits once what it fetched ahead reaches ReadAheadBytes, however much
// the topic holds (3 MB here, against 64 KiB); a fetch loop that counted
// responses instead held up to eight of them, which decompressed can be
// far more than their size on the wire. Once the sink goes on, every event
// is applied once.
func TestGroupBoundsReadAhead(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 1)
	w := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: topic, Balancer: &kafka.Murmur2Balancer{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const n = 20000
	for from := 0; from < n; from += 5000 {
		writeVisits(ctx, t, w, "ra", 50, from, from+5000)
	}

	const bound = 64 << 10
	sink := &gateSink{offsetSink: newOffsetSink(), entered: make(chan struct{}), open: make(chan struct{})}
	reg := prometheus.NewRegistry()
	g, err := consume.NewGroup(consume.Config{Brokers: bs, Topic: topic, GroupID: "readahead-" + topic,
		BatchMax: 100, FetchMaxBytes: 8 << 10, ReadAheadBytes: bound, Registerer: reg}, sink)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(rctx) }()
	defer func() {
		sink.release() // a failed check must not leave the group stuck in Apply
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}()

	<-sink.entered
	// The fetch loop fills the read-ahead and then waits for room: the
	// topic holds forty times the bound (without it, it read 234 540
	// bytes ahead).
	stacktest.WaitFor(t, "the fetch loop to wait for room", time.Minute, func() bool {
		return sumMetric(t, reg, "floodgate_aggregator_read_ahead_waits_total") >= 1
	})
	if v := sumMetric(t, reg, "floodgate_aggregator_read_ahead_bytes"); v > bound || v < bound/4 {
		t.Fatalf("read ahead %.0f bytes with the sink stalled, bound %d", v, bound)
	}
	sink.release()
	stacktest.WaitFor(t, "every event applied", time.Minute, func() bool { return sink.count() >= n })
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for id, k := range sink.seen {
		if k != 1 {
			t.Fatalf("event %s applied %d times", id, k)
		}
	}
}
