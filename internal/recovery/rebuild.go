package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/internal/window"

	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
)

// Store is what Rebuild reads of the live store; *window.Store has it.
type Store interface {
	Resume(ctx context.Context, group, topic string, partition int) (next int64, ok bool, err error)
	Keys() window.Keys
	Prefix() string
}

// Applier writes into the live store as the live aggregator does: batches
// with their offsets, and a recreated topic's offsets moved back;
// *live.Applier is it, in write-back (live.ApplierConfig.WriteBack): it
// counts a partition in a Headroom's memory and writes it to Redis at
// checkpoints, so that a replay starts at the checkpoint and gives back
// what a write-back owner held in memory only when it died. Writing
// through, the apply script would take the records before the owner's
// decisions offset for ones it holds and skip them: those counts would be
// lost.
type Applier interface {
	Apply(ctx context.Context, group string, b consume.Batch, set *rules.Set, now time.Time, hr *live.Headroom) (live.ApplyResult, error)
	ResetOffset(ctx context.Context, group, topic string, partition int, from, to int64) error
	WriteBack() bool
	Resume(ctx context.Context, group, topic string, partition int, hr *live.Headroom) (next int64, ok bool, err error)
	Checkpoint(ctx context.Context, group, topic string, partition int, hr *live.Headroom, now time.Time) (fields int, err error)
}

var (
	_ Store   = (*window.Store)(nil)
	_ Applier = (*live.Applier)(nil)
)

// Config configures Rebuild.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Security is how to reach them: TLS and SASL (zero: plaintext).
	Security kafkaconn.Security
	// Topic of access events. Required.
	Topic string
	// Group is the live consumer group whose counters and offsets are
	// rebuilt, e.g. "floodgate-live". Required.
	Group string
	// Store is the live window store (same key prefix as the aggregator).
	// Required.
	Store Store
	// Applier counts the replayed batches into Store's slots (a
	// live.Applier over Store, in write-back). Required.
	Applier Applier
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
	// OnLostOffsets is what the rebuild does when offsets of a partition
	// it replays are gone from the log, as the aggregator's setting of the
	// same name (consume.Config.OnLostOffsets): the live group stood
	// below the log's start and retention deleted records it never read
	// (only when no record the log still holds is older than the replay's
	// start: those records may have been inside the windows), retention
	// deleted records while the rebuild read them, or the live group stood
	// beyond the log's end (the topic was deleted and recreated). Skip
	// (default) reports each (ERROR log, Result.Lost, Result.Recreated) and
	// replays what the log holds; stop fails the rebuild with a
	// *consume.LostOffsetsError — before it writes anything when the
	// loss is known at the start.
	OnLostOffsets consume.LostOffsetsPolicy
	// MaxFutureSkew is how far ahead of Now an event time may be, as the
	// live aggregator's setting (consume.Config.MaxFutureSkew): events
	// further ahead, which the aggregator dead-letters, are skipped.
	// Default 1m (consume.DefaultMaxFutureSkew).
	MaxFutureSkew time.Duration
	// BatchMax caps the events in one Apply. Default 5000.
	BatchMax int
	// MaxPending is how many bucket fields a partition counts in memory
	// before they are written to Redis (a checkpoint), and MaxHeadroom how
	// many subjects it keeps there: the live sink's settings of the same
	// names. Defaults 50000 and 200000.
	MaxPending, MaxHeadroom int
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
	case c.Applier == nil:
		return errors.New("rebuild config: no applier")
	case !c.Applier.WriteBack():
		return errors.New("rebuild config: the applier writes through: a rebuild counts in memory (live.ApplierConfig.WriteBack), or it would lose what a write-back owner counted past its checkpoint")
	case c.Rules == nil:
		return errors.New("rebuild config: no rules")
	case c.Reset && c.Redis == nil:
		return errors.New("rebuild config: reset needs the redis client")
	case c.Since < 0 || c.BatchMax < 0 || c.Parallel < 0 || c.MaxFutureSkew < 0 || c.MaxPending < 0 || c.MaxHeadroom < 0:
		return errors.New("rebuild config: since, batch max, parallel, max future skew, max pending and max headroom must not be negative")
	case c.MaxPending > live.MaxPendingFields:
		return fmt.Errorf("rebuild config: max pending %d: at most %d", c.MaxPending, live.MaxPendingFields)
	case c.OnLostOffsets != "" && c.OnLostOffsets != consume.LostOffsetsSkip && c.OnLostOffsets != consume.LostOffsetsStop:
		return fmt.Errorf("rebuild config: on lost offsets %q: want skip or stop", c.OnLostOffsets)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Since == 0 {
		c.Since = c.Rules.MaxWindow() + time.Minute
	}
	if c.MaxFutureSkew == 0 {
		c.MaxFutureSkew = consume.DefaultMaxFutureSkew
	}
	if c.OnLostOffsets == "" {
		c.OnLostOffsets = consume.LostOffsetsSkip
	}
	if c.BatchMax == 0 {
		c.BatchMax = 5000
	}
	if c.Parallel == 0 {
		c.Parallel = 4
	}
	if c.MaxPending == 0 {
		c.MaxPending = 50000
	}
	if c.MaxHeadroom == 0 {
		c.MaxHeadroom = 200000
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
	Lost       int64         // offsets deleted by retention before they were counted (see Config.OnLostOffsets)
	Recreated  int           // partitions whose live group stood beyond the log's end (topic recreated)
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

	client := cfg.Security.Client(cfg.Brokers, 10*time.Second, nil)
	if err := groupIdle(ctx, client, cfg.Group); err != nil {
		return res, err
	}
	parts, err := topics.PartitionIDs(ctx, client, cfg.Topic)
	if err != nil {
		return res, fmt.Errorf("rebuild: %w", err)
	}
	// Where the live group stood, read before a reset deletes it: the
	// store's offsets, else the group's (advisory) Kafka commits.
	pos, err := positions(ctx, &cfg, client, parts)
	if err != nil {
		return res, err
	}
	var todo []int
	for _, p := range parts {
		if pos[p].stored && !cfg.Force && !cfg.Reset {
			res.Skipped++
			continue
		}
		todo = append(todo, p)
	}
	if len(todo) == 0 {
		res.Took = time.Since(start)
		return res, nil
	}
	bounds, err := ranges(ctx, client, cfg.Topic, todo, res.From)
	if err != nil {
		return res, err
	}
	if err := settleLostAtStart(ctx, &cfg, &res, todo, pos, bounds); err != nil {
		return res, err
	}
	if cfg.Reset {
		if err := deleteForReset(ctx, &cfg, &res); err != nil {
			return res, err
		}
	}
	read, first := replayStarts(&cfg, todo, pos, bounds)
	firstErr := replayAll(ctx, &cfg, client, todo, first, read, bounds, &res)
	res.Partitions = len(todo)
	res.Took = time.Since(start)
	if firstErr != nil {
		return res, firstErr
	}
	cfg.Logger.Info("rebuilt live counters from kafka", "topic", cfg.Topic, "group", cfg.Group,
		"partitions", res.Partitions, "skipped", res.Skipped, "messages", res.Messages,
		"events", res.Events, "lost_offsets", res.Lost, "recreated_partitions", res.Recreated,
		"from", res.From.Format(time.RFC3339), "took", res.Took)
	return res, nil
}

// settleLostAtStart reports the offsets lost before the rebuild began
// (with stop, it fails before anything is written), and moves the store's
// offset of a recreated partition back to where its replay starts.
func settleLostAtStart(ctx context.Context, cfg *Config, res *Result, todo []int, pos map[int]position, bounds map[int]bound) error {
	for _, p := range todo {
		lost := lostAtStart(cfg.Topic, p, pos[p], bounds[p])
		if lost == nil {
			continue
		}
		if err := reportLost(cfg, res, lost); err != nil {
			return err
		}
		if lost.Beyond && pos[p].stored && !cfg.Reset {
			// The store's offset must come back to where the replay
			// starts, or every replayed batch would be taken for one it
			// already holds.
			if err := cfg.Applier.ResetOffset(ctx, cfg.Group, cfg.Topic, p, pos[p].next, bounds[p].from); err != nil {
				return fmt.Errorf("rebuild: %w", err)
			}
			pos[p] = position{next: bounds[p].from, stored: true}
		}
	}
	return nil
}

// deleteForReset deletes the live keys under the prefix. The old layout's
// keys ("P:{a:k:s}:...", before partition slots) go too: a reset is also
// the migration to the current layout. Only keys of floodgate's shapes
// under the prefix go: a shared Redis holds other applications' keys,
// which a bare "prefix:*" would match.
func deleteForReset(ctx context.Context, cfg *Config, res *Result) error {
	keys := cfg.Store.Keys()
	old := window.GlobEscape(cfg.Store.Prefix())
	for _, del := range []struct {
		pattern string
		owns    func(string) bool
	}{
		{keys.Pattern(), keys.Owns},
		{old + ":{*", func(k string) bool { return oldLayoutKey(cfg.Store.Prefix(), k) }},
		{old + ":off:*", func(k string) bool { return oldLayoutKey(cfg.Store.Prefix(), k) }},
	} {
		n, err := deleteLiveKeys(ctx, cfg.Redis, del.pattern, del.owns)
		res.Deleted += n
		if err != nil {
			return err
		}
	}
	return nil
}

// replayStarts is where each partition's replay starts reading, and where
// its first batch starts: the store refuses a batch that starts after the
// offset it holds (it would skip what lies between), so a partition whose
// offset it keeps (Force) starts there; events older than every window
// are skipped as they are read. Offsets below the log's start are gone
// (reported by settleLostAtStart): the first batch covers them.
func replayStarts(cfg *Config, todo []int, pos map[int]position, bounds map[int]bound) (read, first map[int]int64) {
	read, first = map[int]int64{}, map[int]int64{}
	for _, p := range todo {
		read[p], first[p] = bounds[p].from, bounds[p].from
		if pos[p].stored && !cfg.Reset {
			first[p] = min(bounds[p].from, pos[p].next)
			read[p] = max(first[p], bounds[p].first)
		}
	}
	return read, first
}

// replayAll replays the partitions, cfg.Parallel at a time, adding what
// they did to res; the first failure stops the others.
func replayAll(ctx context.Context, cfg *Config, client *kafka.Client, todo []int, first, read map[int]int64, bounds map[int]bound, res *Result) error {
	var mu sync.Mutex
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(cfg.Parallel)
	for _, p := range todo {
		eg.Go(func() error {
			pr, err := replay(ectx, cfg, client, p, first[p], read[p], bounds[p].end)
			mu.Lock()
			defer mu.Unlock()
			res.Messages += pr.Messages
			res.Events += pr.Events
			res.Invalid += pr.Invalid
			res.Lost += pr.Lost
			return err
		})
	}
	return eg.Wait()
}

// position is where the live group stood on a partition.
type position struct {
	next   int64 // its next offset; -1: unknown
	stored bool  // next is the store's (else the group's Kafka commit)
}

// positions reads the live group's position on each partition: the offset
// the store holds (its checkpoint, where a write-back owner kept one: what
// it counted beyond was in its memory), else the group's last Kafka commit.
func positions(ctx context.Context, cfg *Config, client *kafka.Client, parts []int) (map[int]position, error) {
	out := make(map[int]position, len(parts))
	var unknown []int
	for _, p := range parts {
		next, ok, err := cfg.Store.Resume(ctx, cfg.Group, cfg.Topic, p)
		if err != nil {
			return nil, fmt.Errorf("rebuild: %w", err)
		}
		if ok {
			out[p] = position{next: next, stored: true}
			continue
		}
		out[p] = position{next: -1}
		unknown = append(unknown, p)
	}
	if len(unknown) == 0 {
		return out, nil
	}
	res, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: cfg.Group, Topics: map[string][]int{cfg.Topic: unknown}})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		return nil, fmt.Errorf("rebuild: committed offsets of group %s topic %s: %w", cfg.Group, cfg.Topic, err)
	}
	for _, po := range res.Topics[cfg.Topic] {
		if po.Error == nil && po.CommittedOffset >= 0 && slices.Contains(unknown, po.Partition) {
			out[po.Partition] = position{next: po.CommittedOffset}
		}
	}
	return out, nil
}

// lostAtStart compares the live group's position with the log: beyond its
// end (the topic was recreated), or below its start with nothing older
// than the replay's start left (retention deleted records the group never
// counted, which may have been inside the windows).
func lostAtStart(topic string, p int, pos position, b bound) *consume.LostOffsetsError {
	switch {
	case pos.next < 0:
		return nil
	case pos.next > b.end:
		return &consume.LostOffsetsError{Topic: topic, Partition: p, From: pos.next, To: b.first, Beyond: true}
	case pos.next < b.first && b.from == b.first:
		return &consume.LostOffsetsError{Topic: topic, Partition: p, From: pos.next, To: b.first}
	}
	return nil
}

// reportLost applies the policy to lost offsets: an error with stop; with
// skip an ERROR log naming group, partition and offsets, counted in res.
func reportLost(cfg *Config, res *Result, lost *consume.LostOffsetsError) error {
	if cfg.OnLostOffsets == consume.LostOffsetsStop {
		return fmt.Errorf("rebuild: group %s: %w (--on-lost-offsets=stop: nothing rebuilt past it; rerun with skip to go on)", cfg.Group, lost)
	}
	if lost.Beyond {
		res.Recreated++
		cfg.Logger.Error("rebuild: the live group's offset is beyond the log's end (topic deleted and recreated?): what the old log held is lost; replaying the new log",
			"group", cfg.Group, "topic", lost.Topic, "partition", lost.Partition, "stored", lost.From, "log_start", lost.To)
		return nil
	}
	res.Lost += lost.Lost()
	cfg.Logger.Error("rebuild: offsets lost: deleted by retention before they were counted; their events are not counted",
		"group", cfg.Group, "topic", lost.Topic, "partition", lost.Partition, "from", lost.From, "to", lost.To-1, "lost", lost.Lost())
	return nil
}

// bound is a partition's replay range: from the first offset whose
// timestamp is at or after the replay's start (the end when there is none)
// to the end, and where the log starts.
type bound struct{ first, from, end int64 }

// ranges returns each partition's bound.
func ranges(ctx context.Context, client *kafka.Client, topic string, parts []int, since time.Time) (map[int]bound, error) {
	reqs := make([]kafka.OffsetRequest, 0, 3*len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafka.TimeOffsetOf(p, since), kafka.LastOffsetOf(p), kafka.FirstOffsetOf(p))
	}
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}, IsolationLevel: kafka.ReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("rebuild: list offsets topic=%s since=%s: %w", topic, since.Format(time.RFC3339), err)
	}
	out := map[int]bound{}
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("rebuild: list offsets topic=%s partition=%d: %w", topic, po.Partition, po.Error)
		}
		f := int64(-1)
		for off := range po.Offsets {
			if off >= 0 && (f < 0 || off < f) {
				f = off
			}
		}
		if f < 0 { // no message at or after since
			f = po.LastOffset
		}
		out[po.Partition] = bound{first: po.FirstOffset, from: max(f, po.FirstOffset), end: po.LastOffset}
	}
	return out, nil
}

type partResult struct{ Messages, Events, Invalid, Lost int64 }

// replay reads [from, end) of a partition, committed records only, and
// applies it in batches from offset first (at most from: the offsets
// between are covered by the first batch, not read); every subject is
// evaluated (nothing is known of them).
func replay(ctx context.Context, cfg *Config, client *kafka.Client, p int, first, from, end int64) (partResult, error) {
	if from >= end {
		return partResult{}, nil
	}
	f, err := consume.NewFetcher(consume.FetcherConfig{Client: client, Topic: cfg.Topic, Partition: p, Offset: from, MaxBytes: 4 << 20})
	if err != nil {
		return partResult{}, err
	}
	hr, err := resumeMemory(ctx, cfg, p)
	if err != nil {
		return partResult{}, err
	}
	r := &partReplay{cfg: cfg, p: p, hr: hr, end: end, b: consume.Batch{Topic: cfg.Topic, Partition: p, First: first, Last: from - 1}}
	for f.Next() < end {
		msgs, err := f.Fetch(ctx)
		if err != nil {
			if err := r.fetchFailed(ctx, f, err); err != nil {
				return r.pr, err
			}
			continue
		}
		if len(msgs) == 0 {
			// Offsets left before end but nothing to read: they hold no
			// records (transaction markers). The last batch covers them.
			break
		}
		if err := r.add(ctx, msgs); err != nil {
			return r.pr, err
		}
	}
	r.b.Last = max(r.b.Last, end-1)
	if err := r.flush(ctx); err != nil {
		return r.pr, err
	}
	return r.pr, checkpoint(ctx, cfg, p, hr)
}

// partReplay is one partition's replay: the batch it gathers, and what
// it did.
type partReplay struct {
	cfg *Config
	p   int
	hr  *live.Headroom
	end int64
	b   consume.Batch
	pr  partResult
}

// add gathers the messages before end into the batch, as the live
// aggregator accepts them, applying it whenever it is full.
func (r *partReplay) add(ctx context.Context, msgs []kafka.Message) error {
	now := r.cfg.Now()
	for i := range msgs {
		m := &msgs[i]
		if m.Offset >= r.end {
			break
		}
		r.pr.Messages++
		r.b.Last = m.Offset
		// The live aggregator's acceptance, so rebuild counts exactly what
		// it would have.
		ev, derr := consume.Accept(m, now, r.cfg.MaxFutureSkew)
		if derr != nil {
			r.pr.Invalid++
			continue
		}
		// The limiter's strict counts lived in the same Redis and are gone
		// too: count every event, Counted or not.
		r.b.Records = append(r.b.Records, consume.Record{Offset: m.Offset, Event: ev})
		if len(r.b.Records) >= r.cfg.BatchMax {
			if err := r.flush(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush applies the batch gathered, and checkpoints once memory holds
// MaxPending fields.
func (r *partReplay) flush(ctx context.Context) error {
	b := r.b
	if b.Last < b.First {
		return nil
	}
	res, err := r.cfg.Applier.Apply(ctx, r.cfg.Group, b, r.cfg.Rules, r.cfg.Now(), r.hr)
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	r.pr.Events += int64(res.Applied)
	r.b = consume.Batch{Topic: b.Topic, Partition: b.Partition, First: b.Last + 1, Last: b.Last, Records: b.Records[:0]}
	if r.hr.Resident().Pending >= r.cfg.MaxPending {
		return checkpoint(ctx, r.cfg, r.p, r.hr)
	}
	return nil
}

// fetchFailed settles a failed fetch: offsets lost or unreadable are
// skipped, as the live aggregator skips them (nil: read on); anything
// else stops the partition.
func (r *partReplay) fetchFailed(ctx context.Context, f *consume.Fetcher, err error) error {
	cfg, p := r.cfg, r.p
	var lost *consume.LostOffsetsError
	if errors.As(err, &lost) {
		// Records deleted (or the topic recreated) while the rebuild read
		// them. With skip, the next batch covers the lost offsets; with
		// stop, the batches applied so far stay, with their offset, and
		// the partition stops here.
		var res Result
		if err := reportLost(cfg, &res, lost); err != nil {
			return errors.Join(r.flush(ctx), err)
		}
		if lost.Beyond {
			return fmt.Errorf("rebuild: topic %s partition %d was recreated while it was replayed; run the rebuild again", cfg.Topic, p)
		}
		r.pr.Lost += res.Lost
		f.SetOffset(lost.To)
		return nil
	}
	var unreadable *consume.UnreadableError
	if errors.As(err, &unreadable) {
		// The live aggregator skipped the same offsets (the same Fetcher
		// and bound): the next batch covers them.
		r.pr.Invalid += unreadable.To - unreadable.From
		cfg.Logger.Error("rebuild: offsets skipped: their record batch decompresses past the bound, or a record of theirs holds too many headers; their events are not counted",
			"topic", cfg.Topic, "partition", p, "from", unreadable.From, "to", unreadable.To-1, "err", unreadable.Err)
		return nil
	}
	return fmt.Errorf("rebuild: read topic=%s partition=%d offset=%d: %w", cfg.Topic, p, f.Next(), err)
}

// resumeMemory returns the Applier's memory of partition p, as of its
// checkpoint (empty when the store holds none).
func resumeMemory(ctx context.Context, cfg *Config, p int) (*live.Headroom, error) {
	hr := live.NewHeadroom(cfg.MaxHeadroom)
	if _, _, err := cfg.Applier.Resume(ctx, cfg.Group, cfg.Topic, p, hr); err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	return hr, nil
}

// checkpoint writes what the partition's memory counted to Redis. Refused,
// another writer moved the partition while the rebuild ran: the rebuild
// fails, to be run again with the live group stopped.
func checkpoint(ctx context.Context, cfg *Config, p int, hr *live.Headroom) error {
	if _, err := cfg.Applier.Checkpoint(ctx, cfg.Group, cfg.Topic, p, hr, cfg.Now()); err != nil {
		return fmt.Errorf("rebuild: partition %d: %w", p, err)
	}
	return nil
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
// oldLayoutKey tells whether key has a shape of the layout before partition
// slots: "prefix:{action:kind:subject}:..." or "prefix:off:...".
func oldLayoutKey(prefix, key string) bool {
	rest, ok := strings.CutPrefix(key, prefix+":")
	if !ok {
		return false
	}
	if strings.HasPrefix(rest, "off:") {
		return len(rest) > len("off:")
	}
	inner, after, ok := strings.Cut(strings.TrimPrefix(rest, "{"), "}:")
	return strings.HasPrefix(rest, "{") && ok && after != "" && strings.Count(inner, ":") >= 2
}

func deleteLiveKeys(ctx context.Context, rdb redis.UniversalClient, pattern string, owns func(string) bool) (int64, error) {
	var deleted atomic.Int64
	del := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		pipe := c.Pipeline()
		n := 0
		for iter.Next(ctx) {
			if !owns(iter.Val()) {
				continue
			}
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
