package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/semaphore"

	"github.com/floodgate-dev/floodgate/event"
)

// ErrBufferFull is returned (wrapped) by Publish in NonBlocking mode when
// the buffer has no room for the events.
var ErrBufferFull = errors.New("producer: buffer full")

// ErrClosed is returned (wrapped) by Publish after Close.
var ErrClosed = errors.New("producer: publisher closed")

// messageWriter is the part of *kafka.Writer a Publisher uses. The writer
// must call the Publisher's complete method once for every message that
// WriteMessages accepted (kafka.Writer does through Completion).
type messageWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
	Close() error
}

var _ messageWriter = (*kafka.Writer)(nil)

// Publisher publishes events to Kafka, keyed by Event.Key and partitioned
// like Java's default partitioner. It is safe for concurrent use.
type Publisher struct {
	cfg       Config
	w         messageWriter
	transport *kafka.Transport // nil in tests
	sem       *semaphore.Weighted
	now       func() time.Time
	log       *slog.Logger

	published atomic.Int64
	failed    atomic.Int64
	buffered  atomic.Int64

	errMu    sync.Mutex
	firstErr error

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// Stats counts a Publisher's events since New.
type Stats struct {
	Published int64 // acknowledged by Kafka
	Failed    int64 // in batches that failed after every attempt
	Buffered  int64 // accepted by Publish, not yet acknowledged or failed
}

// New validates cfg and returns a Publisher writing to cfg.Topic. It does
// not connect: the first Publish does. Call Close to flush.
func New(cfg Config) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	acks, _ := parseAcks(cfg.RequiredAcks)
	compression, _ := parseCompression(cfg.Compression)
	transport := cfg.Security.Transport(&kafka.Transport{ClientID: "floodgate-producer"})
	p := newPublisher(cfg, nil)
	p.transport = transport
	p.w = &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Topic:        cfg.Topic,
		Balancer:     &kafka.Murmur2Balancer{Consistent: true},
		MaxAttempts:  cfg.MaxAttempts,
		BatchSize:    cfg.BatchSize,
		BatchBytes:   cfg.BatchBytes,
		BatchTimeout: cfg.BatchTimeout,
		WriteTimeout: cfg.WriteTimeout,
		RequiredAcks: acks,
		Compression:  compression,
		// Always asynchronous underneath: the synchronous Publish waits for
		// its own events through Completion. This keeps the buffer
		// accounting exact even when a caller's context ends early.
		Async:      true,
		Completion: p.complete,
		Transport:  transport,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			p.log.Warn("kafka writer: "+fmt.Sprintf(msg, args...), "topic", cfg.Topic)
		}),
	}
	return p, nil
}

// newPublisher returns a Publisher around w without validating cfg; w may
// be set later (New does, to give the writer p.complete).
func newPublisher(cfg Config, w messageWriter) *Publisher {
	cfg = cfg.withDefaults()
	return &Publisher{
		cfg: cfg,
		w:   w,
		sem: semaphore.NewWeighted(int64(cfg.MaxBuffered)),
		now: time.Now,
		log: cfg.Logger,
	}
}

// Publish validates and encodes events, then hands them to Kafka. If one
// event is invalid, none is published and the error wraps its *event.Error.
//
// When the buffer (Config.MaxBuffered) is full, Publish waits for room
// until ctx ends, or returns ErrBufferFull in NonBlocking mode. In the
// default synchronous mode Publish then waits for Kafka's acknowledgement of
// every event and returns the first failure; if ctx ends first, the events
// may still be delivered. In Async mode it returns once the events are
// buffered, and failures are reported by Stats, Err and Close.
func (p *Publisher) Publish(ctx context.Context, events ...event.Event) error {
	return p.publish(ctx, nil, events)
}

// PublishCounted is Publish with the header event.HeaderCounted = "1": the
// events were already counted in Redis (the limiter's strict mode), so
// aggregators count them in history only.
func (p *Publisher) PublishCounted(ctx context.Context, events ...event.Event) error {
	return p.publish(ctx, []kafka.Header{{Key: event.HeaderCounted, Value: []byte("1")}}, events)
}

// call tracks the events of one synchronous Publish until Kafka answers
// for all of them.
type call struct {
	remaining atomic.Int64
	done      chan struct{}

	mu     sync.Mutex
	failed int64
	err    error
}

func (c *call) finish(n int64, err error) {
	if err != nil {
		c.mu.Lock()
		c.failed += n
		if c.err == nil {
			c.err = err
		}
		c.mu.Unlock()
	}
	if c.remaining.Add(-n) == 0 {
		close(c.done)
	}
}

func (p *Publisher) publish(ctx context.Context, headers []kafka.Header, events []event.Event) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if len(events) == 0 {
		return nil
	}
	var c *call
	if !p.cfg.Async {
		c = &call{done: make(chan struct{})}
		c.remaining.Store(int64(len(events)))
	}
	now := p.now()
	msgs := make([]kafka.Message, len(events))
	for i, e := range events {
		value, err := event.Encode(e)
		if err != nil {
			return fmt.Errorf("publish: event %d of %d id=%q key=%q: %w", i, len(events), e.ID, e.Key(), err)
		}
		msgs[i] = kafka.Message{
			Key:     []byte(e.Key()),
			Value:   value,
			Headers: headers,
			// The record time is the publish time, not the event time:
			// retention and the broker's timestamp checks must not depend
			// on backfilled or skewed event times.
			Time: now,
		}
		if c != nil {
			msgs[i].WriterData = c
		}
	}

	// Hand the events over in chunks that fit the buffer.
	for start := 0; start < len(msgs); start += p.cfg.MaxBuffered {
		chunk := msgs[start:min(start+p.cfg.MaxBuffered, len(msgs))]
		if err := p.write(ctx, chunk); err != nil {
			if start > 0 {
				err = fmt.Errorf("%w (%d of %d events were handed to Kafka before and may be delivered)", err, start, len(msgs))
			}
			return err
		}
	}
	if c == nil {
		return nil
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return fmt.Errorf("publish %d events topic=%s: waiting for acknowledgement (they may still be delivered): %w", len(msgs), p.cfg.Topic, ctx.Err())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return fmt.Errorf("publish topic=%s: %d of %d events failed: %w", p.cfg.Topic, c.failed, len(msgs), c.err)
	}
	return nil
}

// write reserves buffer room for msgs and hands them to the writer.
func (p *Publisher) write(ctx context.Context, msgs []kafka.Message) error {
	n := int64(len(msgs))
	if p.cfg.NonBlocking {
		if !p.sem.TryAcquire(n) {
			return fmt.Errorf("publish %d events topic=%s (%d buffered, limit %d): %w", n, p.cfg.Topic, p.buffered.Load(), p.cfg.MaxBuffered, ErrBufferFull)
		}
	} else if err := p.sem.Acquire(ctx, n); err != nil {
		return fmt.Errorf("publish %d events topic=%s: waiting for buffer room (%d buffered, limit %d): %w", n, p.cfg.Topic, p.buffered.Load(), p.cfg.MaxBuffered, err)
	}
	p.buffered.Add(n)
	// An asynchronous kafka.Writer either batches every message (and later
	// completes each) or returns an error having batched none.
	if err := p.w.WriteMessages(ctx, msgs...); err != nil {
		p.buffered.Add(-n)
		p.sem.Release(n)
		if errors.Is(err, io.ErrClosedPipe) {
			err = ErrClosed
		}
		return fmt.Errorf("publish %d events topic=%s: %w", n, p.cfg.Topic, err)
	}
	return nil
}

// complete is the kafka.Writer Completion callback: Kafka answered for msgs
// (one partition batch), with err nil on success.
func (p *Publisher) complete(msgs []kafka.Message, err error) {
	n := int64(len(msgs))
	if n == 0 {
		return
	}
	if err != nil {
		p.failed.Add(n)
		err = fmt.Errorf("write %d events topic=%s first key=%q: %w", n, p.cfg.Topic, msgs[0].Key, err)
		p.errMu.Lock()
		if p.firstErr == nil {
			p.firstErr = err
		}
		p.errMu.Unlock()
		p.log.Error("publish failed", "topic", p.cfg.Topic, "events", n, "err", err)
	} else {
		p.published.Add(n)
	}
	p.buffered.Add(-n)
	p.sem.Release(n)

	// Messages of one Publish call are contiguous within a batch.
	var last *call
	var count int64
	for i := range msgs {
		c, _ := msgs[i].WriterData.(*call)
		if c != last {
			if last != nil {
				last.finish(count, err)
			}
			last, count = c, 0
		}
		count++
	}
	if last != nil {
		last.finish(count, err)
	}
}

// Stats returns the event counters.
func (p *Publisher) Stats() Stats {
	return Stats{
		Published: p.published.Load(),
		Failed:    p.failed.Load(),
		Buffered:  p.buffered.Load(),
	}
}

// Err reports whether any event failed to publish since New: the first
// failure and how many events failed, or nil. In synchronous mode the same
// failures were also returned by Publish.
func (p *Publisher) Err() error {
	failed := p.failed.Load()
	if failed == 0 {
		return nil
	}
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return fmt.Errorf("%d events failed to publish, first failure: %w", failed, p.firstErr)
}

// Close flushes the buffered events, waits for Kafka's answers and releases
// connections. In Async mode it also returns Err, so that no failure goes
// unreported. Publish fails with ErrClosed afterwards.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		var errs []error
		if err := p.w.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close kafka writer topic=%s: %w", p.cfg.Topic, err))
		}
		if p.transport != nil {
			p.transport.CloseIdleConnections()
		}
		if p.cfg.Async {
			errs = append(errs, p.Err())
		}
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}
