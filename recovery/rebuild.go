package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"floodgate/aggregator"
	"floodgate/rules"
	"floodgate/window"
)

// Store is what Rebuild needs of the live store; *window.Store has it.
type Store interface {
	Resume(ctx context.Context, group, topic string, partition int) (next int64, ok bool, err error)
	Apply(ctx context.Context, group string, b aggregator.Batch, set *rules.Set, now time.Time, hr *window.Headroom) (window.ApplyResult, error)
	Keys() window.Keys
	Prefix() string
}

var _ Store = (*window.Store)(nil)

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
	// Reset first deletes every live key of the store's prefix (counters,
	// deny records, state, change streams, offsets of every partition) and
	// then replays every partition. Use it when the live aggregator kept
	// running after Redis came back empty: it has stored new offsets and
	// partial counters since, which a plain rebuild would leave alone.
	// Requires Redis. Default false.
	Reset bool
	// Redis is the client Reset deletes keys with (every primary of a
	// cluster).
	Redis redis.UniversalClient
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
	case c.Reset && c.Redis == nil:
		return errors.New("rebuild config: reset needs the redis client")
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
	Lost       int64         // offsets deleted by retention while the rebuild read them
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

	client := &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: 10 * time.Second}
	if err := groupIdle(ctx, client, cfg.Group); err != nil {
		return res, err
	}
	if cfg.Reset {
		// The old layout's keys ("P:{a:k:s}:...", before partition slots)
		// go too: a reset is also the migration to the current layout.
		for _, pattern := range []string{cfg.Store.Keys().Pattern(), cfg.Store.Prefix() + ":*"} {
			n, err := deleteLiveKeys(ctx, cfg.Redis, pattern)
			res.Deleted += n
			if err != nil {
				return res, err
			}
		}
	}
	parts, err := partitions(ctx, client, cfg.Topic)
	if err != nil {
		return res, err
	}
	var todo []int
	stored := map[int]int64{}
	for _, p := range parts {
		next, ok, err := cfg.Store.Resume(ctx, cfg.Group, cfg.Topic, p)
		if err != nil {
			return res, fmt.Errorf("rebuild: %w", err)
		}
		if ok && !cfg.Force {
			res.Skipped++
			continue
		}
		if ok {
			stored[p] = next
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
	for p, next := range stored {
		// The store refuses a batch that starts after its offset (it
		// would skip what lies between): start there; events older than
		// every window are skipped as they are read.
		from[p] = min(from[p], next)
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
			pr, err := replay(ctx, &cfg, client, p, from[p], end[p])
			mu.Lock()
			defer mu.Unlock()
			res.Messages += pr.Messages
			res.Events += pr.Events
			res.Invalid += pr.Invalid
			res.Lost += pr.Lost
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

type partResult struct{ Messages, Events, Invalid, Lost int64 }

// replay reads [from, end) of a partition, committed records only, and
// applies it in batches; every subject is evaluated (nothing is known of
// them).
func replay(ctx context.Context, cfg *Config, client *kafka.Client, p int, from, end int64) (partResult, error) {
	var pr partResult
	if from >= end {
		return pr, nil
	}
	f, err := aggregator.NewFetcher(aggregator.FetcherConfig{Client: client, Topic: cfg.Topic, Partition: p, Offset: from, MaxBytes: 4 << 20})
	if err != nil {
		return pr, err
	}
	b := aggregator.Batch{Topic: cfg.Topic, Partition: p, First: from, Last: from - 1}
	flush := func() error {
		if b.Last < b.First {
			return nil
		}
		res, err := cfg.Store.Apply(ctx, cfg.Group, b, cfg.Rules, cfg.Now(), nil)
		if err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
		pr.Events += int64(res.Applied)
		b = aggregator.Batch{Topic: cfg.Topic, Partition: p, First: b.Last + 1, Last: b.Last, Records: b.Records[:0]}
		return nil
	}
	for f.Next() < end {
		msgs, err := f.Fetch(ctx)
		var lost *aggregator.LostOffsetsError
		if errors.As(err, &lost) && !lost.Beyond {
			// Retention deleted records while the rebuild read them: they
			// cannot be counted; the next batch covers their offsets.
			pr.Lost += lost.Lost()
			cfg.Logger.Error("rebuild: offsets lost (deleted by retention); their events are not counted",
				"topic", cfg.Topic, "partition", p, "from", lost.From, "to", lost.To-1, "lost", lost.Lost())
			f.SetOffset(lost.To)
			continue
		}
		if err != nil {
			return pr, fmt.Errorf("rebuild: read topic=%s partition=%d offset=%d: %w", cfg.Topic, p, f.Next(), err)
		}
		if len(msgs) == 0 {
			// Offsets left before end but nothing to read: they hold no
			// records (transaction markers). The last batch covers them.
			break
		}
		now := cfg.Now()
		for i := range msgs {
			m := &msgs[i]
			if m.Offset >= end {
				break
			}
			pr.Messages++
			b.Last = m.Offset
			// The live aggregator's acceptance, so rebuild counts exactly
			// what it would have.
			ev, derr := aggregator.Accept(m, now, cfg.MaxFutureSkew)
			if derr != nil {
				pr.Invalid++
				continue
			}
			// The limiter's strict counts lived in the same Redis and are
			// gone too: count every event, Counted or not.
			b.Records = append(b.Records, aggregator.Record{Offset: m.Offset, Event: ev})
			if len(b.Records) >= cfg.BatchMax {
				if err := flush(); err != nil {
					return pr, err
				}
			}
		}
	}
	b.Last = max(b.Last, end-1)
	return pr, flush()
}

// groupIdle refuses a rebuild while the live group has members: a running
// aggregator would store offsets and counts of its own beside the rebuild's
// (with Reset, re-create offsets the rebuild just deleted), and the replayed
// batches would be taken for duplicates.
func groupIdle(ctx context.Context, client *kafka.Client, group string) error {
	res, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return fmt.Errorf("rebuild: describe group %s: %w", group, err)
	}
	for _, g := range res.Groups {
		if g.Error != nil {
			return fmt.Errorf("rebuild: describe group %s: %w", group, g.Error)
		}
		if len(g.Members) > 0 {
			hosts := make([]string, 0, len(g.Members))
			for _, m := range g.Members {
				hosts = append(hosts, m.ClientHost)
			}
			return fmt.Errorf("rebuild: the live group %s has %d running members (%s): stop every live aggregator first, then rebuild", group, len(g.Members), strings.Join(hosts, ", "))
		}
	}
	return nil
}

// deleteLiveKeys unlinks every key matching pattern, on every primary of a
// cluster, one key per command (keys of many slots).
func deleteLiveKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) (int64, error) {
	var deleted atomic.Int64
	del := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		pipe := c.Pipeline()
		n := 0
		for iter.Next(ctx) {
			pipe.Unlink(ctx, iter.Val())
			if n++; n == 500 {
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
				deleted.Add(int64(n))
				n = 0
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if n > 0 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			deleted.Add(int64(n))
		}
		return nil
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, del)
	case *redis.Client:
		err = del(ctx, c)
	default:
		err = fmt.Errorf("unsupported redis client %T", rdb)
	}
	if err != nil {
		return deleted.Load(), fmt.Errorf("rebuild: delete %s: %w", pattern, err)
	}
	return deleted.Load(), nil
}
