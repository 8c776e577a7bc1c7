package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"floodgate/aggregator"
	"floodgate/event"
	"floodgate/rules"
	"floodgate/window"
)

// Store is what Rebuild needs of the live store; *window.Store has it.
type Store interface {
	Resume(ctx context.Context, group, topic string, partition int) (next int64, ok bool, err error)
	Apply(ctx context.Context, group string, b aggregator.Batch, set *rules.Set, now time.Time) (window.ApplyResult, error)
}

var _ Store = (*window.Store)(nil)

// Keys deletes the live keys before a Reset rebuild; *redis.Client has it.
type Keys interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
	Unlink(ctx context.Context, keys ...string) *redis.IntCmd
}

var _ Keys = (*redis.Client)(nil)

// Config configures Rebuild.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Topic of access events. Required.
	Topic string
	// Group is the live consumer group whose counters and offsets are
	// rebuilt, e.g. "floodgate-live". Required.
	Group string
	// Store is the live window store (same key prefix as the aggregator).
	// Required.
	Store Store
	// Rules decide what is counted, as in the live aggregator. Required.
	Rules *rules.Set
	// Since is how far back to replay. Default: the longest window of Rules
	// plus one minute.
	Since time.Duration
	// Force replays partitions whose offset Redis still holds too. Their
	// batches are then no-ops (the store already holds them), so Force only
	// matters after the offsets were deleted on purpose. Default false.
	Force bool
	// Reset first deletes every key under Prefix (counters, deny records,
	// offsets of every partition) and then replays every partition. Use it
	// when the live aggregator kept running after Redis came back empty: it
	// has stored new offsets and partial counters since, which a plain
	// rebuild would leave alone. Requires Keys and Prefix. Default false.
	Reset  bool
	Keys   Keys
	Prefix string
	// MaxFutureSkew is how far ahead of Now an event time may be, as the
	// live aggregator's setting (aggregator.Config.MaxFutureSkew): events
	// further ahead, which the aggregator dead-letters, are skipped.
	// Default 5s.
	MaxFutureSkew time.Duration
	// BatchMax caps the events in one Apply. Default 5000.
	BatchMax int
	// Parallel is how many partitions replay at once. Default 4.
	Parallel int
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("rebuild config: no brokers")
	case c.Topic == "":
		return errors.New("rebuild config: no topic")
	case c.Group == "":
		return errors.New("rebuild config: no consumer group")
	case c.Store == nil:
		return errors.New("rebuild config: no window store")
	case c.Rules == nil:
		return errors.New("rebuild config: no rules")
	case c.Reset && (c.Keys == nil || c.Prefix == ""):
		return errors.New("rebuild config: reset needs the redis keys client and the key prefix")
	case c.Since < 0 || c.BatchMax < 0 || c.Parallel < 0 || c.MaxFutureSkew < 0:
		return errors.New("rebuild config: since, batch max, parallel and max future skew must not be negative")
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Since == 0 {
		c.Since = c.Rules.MaxWindow() + time.Minute
	}
	if c.MaxFutureSkew == 0 {
		c.MaxFutureSkew = 5 * time.Second
	}
	if c.BatchMax == 0 {
		c.BatchMax = 5000
	}
	if c.Parallel == 0 {
		c.Parallel = 4
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Result tells what Rebuild did.
type Result struct {
	Partitions int           // partitions replayed
	Skipped    int           // partitions whose offset Redis still held
	Deleted    int64         // keys deleted by Reset
	Messages   int64         // Kafka messages read
	Events     int64         // events counted into buckets
	Invalid    int64         // malformed or too far future messages skipped (the DLQ has them)
	Took       time.Duration // wall time
	From       time.Time     // replay start time (now − Since)
}

// Rebuild replays the last Since of the topic into the live store for every
// partition whose offset the store lacks. See the package documentation.
func Rebuild(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg.setDefaults()
	start := cfg.Now()
	res := Result{From: start.Add(-cfg.Since)}

	if cfg.Reset {
		n, err := deletePrefix(ctx, cfg.Keys, cfg.Prefix)
		res.Deleted = n
		if err != nil {
			return res, err
		}
	}
	client := &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: 10 * time.Second}
	parts, err := partitions(ctx, client, cfg.Topic)
	if err != nil {
		return res, err
	}
	var todo []int
	for _, p := range parts {
		_, ok, err := cfg.Store.Resume(ctx, cfg.Group, cfg.Topic, p)
		if err != nil {
			return res, fmt.Errorf("rebuild: %w", err)
		}
		if ok && !cfg.Force {
			res.Skipped++
			continue
		}
		todo = append(todo, p)
	}
	if len(todo) == 0 {
		res.Took = time.Since(start)
		return res, nil
	}
	from, end, err := ranges(ctx, client, cfg.Topic, todo, res.From)
	if err != nil {
		return res, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		sem      = make(chan struct{}, cfg.Parallel)
	)
	for _, p := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			pr, err := replay(ctx, &cfg, p, from[p], end[p])
			mu.Lock()
			defer mu.Unlock()
			res.Messages += pr.Messages
			res.Events += pr.Events
			res.Invalid += pr.Invalid
			if err != nil && firstErr == nil {
				firstErr = err
				cancel()
			}
		}()
	}
	wg.Wait()
	res.Partitions = len(todo)
	res.Took = time.Since(start)
	if firstErr != nil {
		return res, firstErr
	}
	cfg.Logger.Info("rebuilt live counters from kafka", "topic", cfg.Topic, "group", cfg.Group,
		"partitions", res.Partitions, "skipped", res.Skipped, "messages", res.Messages,
		"events", res.Events, "from", res.From.Format(time.RFC3339), "took", res.Took)
	return res, nil
}

func partitions(ctx context.Context, client *kafka.Client, topic string) ([]int, error) {
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("rebuild: metadata topic=%s: %w", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name == topic {
			if t.Error != nil {
				return nil, fmt.Errorf("rebuild: metadata topic=%s: %w", topic, t.Error)
			}
			ps := make([]int, 0, len(t.Partitions))
			for _, p := range t.Partitions {
				ps = append(ps, p.ID)
			}
			sort.Ints(ps)
			return ps, nil
		}
	}
	return nil, fmt.Errorf("rebuild: topic %s not found", topic)
}

// ranges returns, per partition, the first offset whose timestamp is at or
// after since (the end when there is none) and the current end.
func ranges(ctx context.Context, client *kafka.Client, topic string, parts []int, since time.Time) (from, end map[int]int64, err error) {
	reqs := make([]kafka.OffsetRequest, 0, 3*len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafka.TimeOffsetOf(p, since), kafka.LastOffsetOf(p), kafka.FirstOffsetOf(p))
	}
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, nil, fmt.Errorf("rebuild: list offsets topic=%s since=%s: %w", topic, since.Format(time.RFC3339), err)
	}
	from, end = map[int]int64{}, map[int]int64{}
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			return nil, nil, fmt.Errorf("rebuild: list offsets topic=%s partition=%d: %w", topic, po.Partition, po.Error)
		}
		end[po.Partition] = po.LastOffset
		f := int64(-1)
		for off := range po.Offsets {
			if off >= 0 && (f < 0 || off < f) {
				f = off
			}
		}
		if f < 0 { // no message at or after since
			f = po.LastOffset
		}
		from[po.Partition] = max(f, po.FirstOffset)
	}
	return from, end, nil
}

type partResult struct{ Messages, Events, Invalid int64 }

// replay reads [from, end) of a partition and applies it in batches.
func replay(ctx context.Context, cfg *Config, p int, from, end int64) (partResult, error) {
	var pr partResult
	if from >= end {
		return pr, nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: cfg.Brokers, Topic: cfg.Topic, Partition: p,
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 250 * time.Millisecond,
	})
	defer r.Close()
	if err := r.SetOffset(from); err != nil {
		return pr, fmt.Errorf("rebuild: seek topic=%s partition=%d offset=%d: %w", cfg.Topic, p, from, err)
	}
	b := aggregator.Batch{Topic: cfg.Topic, Partition: p, First: from, Last: from - 1}
	flush := func() error {
		if b.Last < b.First {
			return nil
		}
		res, err := cfg.Store.Apply(ctx, cfg.Group, b, cfg.Rules, cfg.Now())
		if err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
		pr.Events += int64(res.Applied)
		b = aggregator.Batch{Topic: cfg.Topic, Partition: p, First: b.Last + 1, Last: b.Last, Records: b.Records[:0]}
		return nil
	}
	for b.Last+1 < end {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return pr, fmt.Errorf("rebuild: read topic=%s partition=%d offset=%d: %w", cfg.Topic, p, b.Last+1, err)
		}
		pr.Messages++
		b.Last = m.Offset
		if ev, err := event.Decode(m.Value); err != nil || event.CheckKey(m.Key, ev) != nil || tooFarAhead(cfg, ev) {
			pr.Invalid++
		} else {
			// The limiter's strict counts lived in the same Redis and are
			// gone too: count every event, Counted or not.
			b.Records = append(b.Records, aggregator.Record{Offset: m.Offset, Event: ev})
		}
		if len(b.Records) >= cfg.BatchMax || b.Last+1 >= end {
			if err := flush(); err != nil {
				return pr, err
			}
		}
	}
	return pr, flush()
}

// tooFarAhead reports whether ev lies more than MaxFutureSkew ahead of the
// rebuild's clock: the live aggregator dead-letters such events, so the
// rebuild must not count them either.
func tooFarAhead(cfg *Config, ev event.Event) bool {
	return ev.TS.After(cfg.Now().Add(cfg.MaxFutureSkew))
}

// deletePrefix unlinks every key matching prefix+":*".
func deletePrefix(ctx context.Context, keys Keys, prefix string) (int64, error) {
	var (
		cursor  uint64
		deleted int64
	)
	for {
		batch, next, err := keys.Scan(ctx, cursor, prefix+":*", 1000).Result()
		if err != nil {
			return deleted, fmt.Errorf("rebuild: scan %s:*: %w", prefix, err)
		}
		if len(batch) > 0 {
			n, err := keys.Unlink(ctx, batch...).Result()
			if err != nil {
				return deleted, fmt.Errorf("rebuild: unlink %d keys of %s:*: %w", len(batch), prefix, err)
			}
			deleted += n
		}
		if next == 0 {
			return deleted, nil
		}
		cursor = next
	}
}
