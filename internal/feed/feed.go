package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/jitter"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// Streams is what a follower needs of a Redis client besides the store's
// scripts: *redis.Client and *redis.ClusterClient have it.
type Streams interface {
	XRead(ctx context.Context, a *redis.XReadArgs) *redis.XStreamSliceCmd
}

var (
	_ Streams = (*redis.Client)(nil)
	_ Streams = (*redis.ClusterClient)(nil)
)

// Source is the store whose change streams are followed; *window.Store.
type Source interface {
	Snapshot(ctx context.Context, partition int, now time.Time) (window.Snapshot, error)
	Keys() window.Keys
}

var _ Source = (*window.Store)(nil)

// Handler receives one partition's changes, in order, from one goroutine
// per partition.
type Handler interface {
	// Reset replaces everything known of the partition by a snapshot.
	Reset(partition int, snap window.Snapshot)
	// Apply applies the next change.
	Apply(partition int, c window.Change)
}

// Config configures Follow.
type Config struct {
	Source    Source  // required
	Streams   Streams // required
	Partition int
	Handler   Handler // required
	// SkipStates leaves the entries' states unparsed (Change.States is
	// empty): for a handler that reads only decisions and bans.
	SkipStates bool
	// From, when set, starts after this entry id without a snapshot (the
	// decisions relay: it needs every change from its cursor on, not the
	// state). A gap in sequence numbers is then reported to OnGap and
	// followed over. Empty: start from a snapshot, and take a new snapshot
	// on a gap (the limiter: state is what it needs, and the snapshot holds
	// it whole).
	From string
	// FromSeq is the sequence number of the entry From names (0: unknown,
	// and the first entry read is not checked for a gap).
	FromSeq int64
	// OnGap is told of entries lost between two it read (want is the seq
	// expected, got the one read). Nil: logged only.
	OnGap func(partition int, want, got int64)
	// Flush, when set, is called after the entries of each read were
	// applied (the relay publishes them); an error ends Follow (it returns
	// it), so Flush retries what it can itself.
	Flush func(ctx context.Context) error
	// Block is how long one XREAD waits for new entries. Default 1s.
	Block time.Duration
	// Count caps the entries of one XREAD. Default 512.
	Count int64
	// RetryBackoff is the least pause after a failed read; the pauses
	// double, jittered (followers that fail together, as in a Redis
	// failover, do not retry together), up to 5s. Default 100ms.
	RetryBackoff time.Duration
	// Metrics, when set, receives lag and resync figures.
	Metrics *Metrics
	// Now is the clock. Default time.Now.
	Now    func() time.Time
	Logger *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.Source == nil || c.Streams == nil || c.Handler == nil:
		return errors.New("feed: source, streams and handler are required")
	case c.Partition < 0:
		return fmt.Errorf("feed: partition %d", c.Partition)
	}
	if c.Block <= 0 {
		c.Block = time.Second
	}
	if c.Count <= 0 {
		c.Count = 512
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Follow follows one partition's change stream until ctx ends: a snapshot
// (unless From is set), then every entry after it, in order. A read error
// is retried with backoff (a Redis restart or failover); a gap in sequence
// numbers — entries trimmed before this reader got to them, or lost with a
// failed-over primary — makes it take a new snapshot, or with From, is
// reported and followed over. It returns nil when ctx ends.
func Follow(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	f := &follower{cfg: cfg, log: cfg.Logger.With("partition", cfg.Partition), m: cfg.Metrics.partition(cfg.Partition)}
	return f.run(ctx)
}

type follower struct {
	cfg  Config
	log  *slog.Logger
	m    partitionMetrics
	last string // id of the last entry handled
	seq  int64  // its sequence number; -1 when not known
}

func (f *follower) run(ctx context.Context) error {
	wait := jitter.New(f.cfg.RetryBackoff, 5*time.Second)
	synced := false
	if f.cfg.From != "" {
		f.last, f.seq, synced = f.cfg.From, f.cfg.FromSeq, true
		if f.seq <= 0 {
			f.seq = -1
		}
	}
	for ctx.Err() == nil {
		if !synced {
			if err := f.resync(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				backoff := wait.Next()
				f.log.Warn("change stream snapshot failed; retrying", "err", err, "backoff", backoff)
				f.m.errors.Inc()
				sleep(ctx, backoff)
				continue
			}
			synced = true
		}
		gap, err := f.read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			backoff := wait.Next()
			f.log.Warn("change stream read failed; retrying", "err", err, "backoff", backoff)
			f.m.errors.Inc()
			sleep(ctx, backoff)
			continue
		}
		wait.Reset()
		if f.cfg.Flush != nil {
			if err := f.cfg.Flush(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		if gap && f.cfg.From == "" {
			synced = false
		}
	}
	return nil
}

func (f *follower) resync(ctx context.Context) error {
	snap, err := f.cfg.Source.Snapshot(ctx, f.cfg.Partition, f.cfg.Now())
	if err != nil {
		return err
	}
	f.cfg.Handler.Reset(f.cfg.Partition, snap)
	f.last, f.seq = snap.LastID, snap.Seq
	f.m.resyncs.Inc()
	f.m.lag.Set(0)
	return nil
}

// read handles the entries after f.last; gap reports a break in sequence.
func (f *follower) read(ctx context.Context) (gap bool, err error) {
	key := f.cfg.Source.Keys().Log(f.cfg.Partition)
	res, err := f.cfg.Streams.XRead(ctx, &redis.XReadArgs{Streams: []string{key, f.last}, Count: f.cfg.Count, Block: f.cfg.Block}).Result()
	if errors.Is(err, redis.Nil) {
		f.m.lag.Set(0) // caught up: nothing new within Block
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read change stream %s after %s: %w", key, f.last, err)
	}
	for _, s := range res {
		for _, m := range s.Messages {
			parse := window.ParseChange
			if f.cfg.SkipStates {
				parse = window.ParseChangeWithoutStates
			}
			c, err := parse(m)
			if err != nil {
				// A malformed entry can't be applied; skipping it silently
				// could hide a deny, so it counts as a gap.
				f.log.Error("unreadable change entry; treating it as a gap", "id", m.ID, "err", err)
				f.m.errors.Inc()
				f.last = m.ID
				return true, nil
			}
			if f.seq >= 0 && c.Seq != f.seq+1 {
				f.m.gaps.Inc()
				if f.cfg.OnGap != nil {
					f.cfg.OnGap(f.cfg.Partition, f.seq+1, c.Seq)
				} else {
					f.log.Warn("change stream gap", "want_seq", f.seq+1, "got_seq", c.Seq)
				}
				if f.cfg.From == "" {
					return true, nil
				}
			}
			f.cfg.Handler.Apply(f.cfg.Partition, c)
			f.last, f.seq = c.ID, c.Seq
			f.m.entries.Inc()
			if ms, ok := idMillis(c.ID); ok {
				f.m.lag.Set(max(0, float64(f.cfg.Now().UnixMilli()-ms)/1000))
			}
		}
	}
	return false, nil
}

// idMillis is the Redis time of a stream entry id "<ms>-<n>".
func idMillis(id string) (int64, bool) {
	ms, _, ok := strings.Cut(id, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	return n, err == nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
