package producer

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"defaults", Config{Brokers: []string{"127.0.0.1:19092"}}, ""},
		{"no brokers", Config{}, "at least one broker"},
		{"bad broker", Config{Brokers: []string{"localhost"}}, "want host:port"},
		{"bad acks", Config{Brokers: []string{"h:1"}, RequiredAcks: "most"}, "required acks"},
		{"acks one", Config{Brokers: []string{"h:1"}, RequiredAcks: "one"}, ""},
		{"bad compression", Config{Brokers: []string{"h:1"}, Compression: "brotli"}, "compression"},
		{"compression none", Config{Brokers: []string{"h:1"}, Compression: "none"}, ""},
		{"small batch bytes", Config{Brokers: []string{"h:1"}, BatchBytes: 100}, "batch bytes"},
		{"negative buffer", Config{Brokers: []string{"h:1"}, MaxBuffered: -1}, "max buffered"},
		{"negative linger", Config{Brokers: []string{"h:1"}, BatchTimeout: -time.Second}, "batch timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				if _, err := New(tt.cfg); err != nil {
					t.Fatalf("New = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want error containing %q", err, tt.wantErr)
			}
			if _, err := New(tt.cfg); err == nil {
				t.Fatal("New accepted an invalid config")
			}
		})
	}
}

// fakeWriter stands in for kafka.Writer: it keeps written messages pending
// until release completes them, like Kafka acknowledging batches.
type fakeWriter struct {
	complete func([]kafka.Message, error)

	mu       sync.Mutex
	pending  [][]kafka.Message
	written  []kafka.Message
	auto     bool  // complete at once
	ackErr   error // error given to completions
	writeErr error // error returned by WriteMessages
	closed   bool
}

func (w *fakeWriter) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return errors.New("io: read/write on closed pipe")
	}
	if w.writeErr != nil {
		w.mu.Unlock()
		return w.writeErr
	}
	batch := append([]kafka.Message(nil), msgs...)
	w.written = append(w.written, batch...)
	auto := w.auto
	if !auto {
		w.pending = append(w.pending, batch)
	}
	w.mu.Unlock()
	if auto {
		go w.complete(batch, w.ackErr)
	}
	return nil
}

// release completes every pending batch with err.
func (w *fakeWriter) release(err error) {
	w.mu.Lock()
	pending := w.pending
	w.pending = nil
	w.mu.Unlock()
	for _, b := range pending {
		w.complete(b, err)
	}
}

func (w *fakeWriter) Close() error {
	w.release(w.ackErr)
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	return nil
}

func newTestPublisher(t *testing.T, cfg Config, w *fakeWriter) *Publisher {
	t.Helper()
	cfg.Brokers = []string{"127.0.0.1:1"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p := newPublisher(cfg, w)
	w.complete = p.complete
	p.now = func() time.Time { return time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC) }
	return p
}

func testEvents(n int) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		out[i] = event.Event{ID: event.NewID(), Action: "login_failed", Kind: "ip", Subject: "203.0.113." + string(rune('0'+i%10)), TS: time.Date(2024, 5, 6, 7, 0, 0, 0, time.UTC)}
	}
	return out
}

func TestPublishSync(t *testing.T) {
	w := &fakeWriter{auto: true}
	p := newTestPublisher(t, Config{}, w)
	evs := testEvents(3)
	if err := p.Publish(t.Context(), evs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got := p.Stats(); got != (Stats{Published: 3}) {
		t.Errorf("Stats = %+v", got)
	}
	for i, m := range w.written {
		if string(m.Key) != evs[i].Key() {
			t.Errorf("message %d key %q, want %q", i, m.Key, evs[i].Key())
		}
		e, err := event.Decode(m.Value)
		if err != nil || e.ID != evs[i].ID {
			t.Errorf("message %d value %s: %v", i, m.Value, err)
		}
		if !m.Time.Equal(p.now()) {
			t.Errorf("message %d time %v, want publish time", i, m.Time)
		}
		if len(m.Headers) != 0 {
			t.Errorf("message %d headers %v", i, m.Headers)
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := p.Publish(t.Context(), evs...); !errors.Is(err, ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
}

func TestPublishCountedHeader(t *testing.T) {
	w := &fakeWriter{auto: true}
	p := newTestPublisher(t, Config{}, w)
	if err := p.PublishCounted(t.Context(), testEvents(1)...); err != nil {
		t.Fatal(err)
	}
	h := w.written[0].Headers
	if len(h) != 1 || h[0].Key != event.HeaderCounted || string(h[0].Value) != "1" {
		t.Errorf("headers = %v, want %s=1", h, event.HeaderCounted)
	}
}

func TestPublishSyncKafkaError(t *testing.T) {
	ackErr := kafka.NotEnoughReplicas
	w := &fakeWriter{auto: true, ackErr: ackErr}
	p := newTestPublisher(t, Config{}, w)
	err := p.Publish(t.Context(), testEvents(2)...)
	if !errors.Is(err, ackErr) {
		t.Fatalf("Publish = %v, want %v", err, ackErr)
	}
	if got := p.Stats(); got.Failed != 2 || got.Published != 0 || got.Buffered != 0 {
		t.Errorf("Stats = %+v", got)
	}
	if !errors.Is(p.Err(), ackErr) {
		t.Errorf("Err = %v", p.Err())
	}
	// Sync failures were returned by Publish; Close does not repeat them.
	if err := p.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}

func TestPublishAsyncErrorsSurface(t *testing.T) {
	ackErr := kafka.RequestTimedOut
	w := &fakeWriter{ackErr: ackErr}
	p := newTestPublisher(t, Config{Async: true}, w)
	if err := p.Publish(t.Context(), testEvents(4)...); err != nil {
		t.Fatalf("async Publish = %v, want nil before acknowledgement", err)
	}
	if got := p.Stats(); got.Buffered != 4 {
		t.Errorf("Stats before ack = %+v", got)
	}
	if p.Err() != nil {
		t.Errorf("Err before ack = %v", p.Err())
	}
	err := p.Close() // flushes: the fake completes with ackErr
	if !errors.Is(err, ackErr) || !strings.Contains(err.Error(), "4 events failed") {
		t.Fatalf("Close = %v, want the async failure", err)
	}
	if got := p.Stats(); got != (Stats{Failed: 4}) {
		t.Errorf("Stats = %+v", got)
	}
}

func TestPublishBackPressure(t *testing.T) {
	w := &fakeWriter{}
	p := newTestPublisher(t, Config{Async: true, MaxBuffered: 3}, w)
	if err := p.Publish(t.Context(), testEvents(3)...); err != nil {
		t.Fatal(err)
	}

	// Full: a blocking Publish waits until its deadline.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := p.Publish(ctx, testEvents(1)...); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish on a full buffer = %v, want deadline exceeded", err)
	}

	// It proceeds as soon as Kafka acknowledges.
	done := make(chan error, 1)
	go func() { done <- p.Publish(t.Context(), testEvents(2)...) }()
	select {
	case err := <-done:
		t.Fatalf("Publish returned %v while the buffer was full", err)
	case <-time.After(20 * time.Millisecond):
	}
	w.release(nil)
	if err := <-done; err != nil {
		t.Fatalf("Publish after room was made = %v", err)
	}
	if got := p.Stats(); got != (Stats{Published: 3, Buffered: 2}) {
		t.Errorf("Stats = %+v", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestPublishNonBlocking(t *testing.T) {
	w := &fakeWriter{}
	p := newTestPublisher(t, Config{Async: true, NonBlocking: true, MaxBuffered: 2}, w)
	if err := p.Publish(t.Context(), testEvents(2)...); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(t.Context(), testEvents(1)...); !errors.Is(err, ErrBufferFull) {
		t.Fatalf("Publish = %v, want ErrBufferFull", err)
	}
	w.release(nil)
	if err := p.Publish(t.Context(), testEvents(1)...); err != nil {
		t.Fatalf("Publish after release = %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestPublishChunksLargeCalls(t *testing.T) {
	w := &fakeWriter{auto: true}
	p := newTestPublisher(t, Config{MaxBuffered: 4}, w)
	if err := p.Publish(t.Context(), testEvents(10)...); err != nil {
		t.Fatalf("Publish of more events than MaxBuffered: %v", err)
	}
	if got := p.Stats(); got.Published != 10 || got.Buffered != 0 {
		t.Errorf("Stats = %+v", got)
	}
}

func TestPublishInvalidEvent(t *testing.T) {
	w := &fakeWriter{auto: true}
	p := newTestPublisher(t, Config{}, w)
	evs := testEvents(3)
	evs[1].Kind = "IP"
	err := p.Publish(t.Context(), evs...)
	var ee *event.Error
	if !errors.As(err, &ee) || ee.Reason != event.ReasonInvalidField || ee.Field != "kind" {
		t.Fatalf("Publish = %v, want invalid_field kind", err)
	}
	if !strings.Contains(err.Error(), "event 1 of 3") {
		t.Errorf("error %q does not say which event", err)
	}
	if len(w.written) != 0 {
		t.Errorf("%d messages written, want none", len(w.written))
	}
}

func TestPublishWriteError(t *testing.T) {
	w := &fakeWriter{writeErr: kafka.UnknownTopicOrPartition}
	p := newTestPublisher(t, Config{MaxBuffered: 2, NonBlocking: true}, w)
	if err := p.Publish(t.Context(), testEvents(2)...); !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Fatalf("Publish = %v", err)
	}
	// The buffer room was given back.
	w.mu.Lock()
	w.writeErr, w.auto = nil, true
	w.mu.Unlock()
	if err := p.Publish(t.Context(), testEvents(2)...); err != nil {
		t.Fatalf("Publish after a write error = %v", err)
	}
}

func TestPublishSyncContextEnds(t *testing.T) {
	w := &fakeWriter{}
	p := newTestPublisher(t, Config{}, w)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := p.Publish(ctx, testEvents(2)...); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish = %v, want deadline exceeded", err)
	}
	// The late acknowledgement is still accounted for.
	w.release(nil)
	if got := p.Stats(); got != (Stats{Published: 2}) {
		t.Errorf("Stats = %+v", got)
	}
}

func TestPublishConcurrent(t *testing.T) {
	w := &fakeWriter{auto: true}
	p := newTestPublisher(t, Config{MaxBuffered: 16}, w)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if err := p.Publish(t.Context(), testEvents(5)...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := p.Stats(); got != (Stats{Published: 2000}) {
		t.Errorf("Stats = %+v", got)
	}
}
