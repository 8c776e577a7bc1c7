package decide

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/internal/feed"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// SyncConfig configures Sync.
type SyncConfig struct {
	State   *State       // required
	Source  feed.Source  // the window store; required
	Streams feed.Streams // the Redis client; required
	// Partitions returns the events topic's partition count (watched):
	// one change stream is followed per partition. Required.
	Partitions func() int
	// Metrics of the followers; nil registers nothing.
	Metrics *feed.Metrics
	Now     func() time.Time
	Logger  *slog.Logger
}

// Sync keeps state in step with the change streams of every partition until
// ctx ends: a snapshot of each, then its changes as the aggregator writes
// them. Partitions added later are followed within ten seconds. The state
// is ready (State.Loaded) once every partition's snapshot is in.
func Sync(ctx context.Context, cfg SyncConfig) error {
	if cfg.State == nil || cfg.Source == nil || cfg.Streams == nil || cfg.Partitions == nil {
		return errors.New("limiter sync: state, source, streams and partitions are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		cfg.State.RunSweeper(ctx, 10*time.Second, cfg.Now)
	}()
	// One snapshot at a time: a snapshot is held whole until its partition
	// is reset from it, so loading every partition at once would hold the
	// whole of Redis's state at the start, past any cap on the State.
	src := gatedSource{Source: cfg.Source, gate: make(chan struct{}, 1), max: cfg.State.Cap()}
	following := 0
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		for p := following; p < cfg.Partitions(); p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := feed.Follow(ctx, feed.Config{
					Source: src, Streams: cfg.Streams, Partition: p, Handler: cfg.State,
					Metrics: cfg.Metrics, Now: cfg.Now, Logger: cfg.Logger,
				})
				if err != nil {
					cfg.Logger.Error("change stream follower stopped", "partition", p, "err", err)
				}
			}()
			following = p + 1
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// gatedSource lets one snapshot be read at a time, and bounds it to the
// State's cap when the source can: a partition's snapshot is held whole
// until the State takes it, and an attacker decides how large it is.
type gatedSource struct {
	feed.Source
	gate chan struct{}
	max  int // 0: no bound
}

// boundedSource is a feed.Source that can bound a snapshot
// (window.Store.SnapshotAtMost).
type boundedSource interface {
	SnapshotAtMost(ctx context.Context, partition int, now time.Time, max int) (window.Snapshot, error)
}

var _ boundedSource = (*window.Store)(nil)

func (g gatedSource) Snapshot(ctx context.Context, partition int, now time.Time) (window.Snapshot, error) {
	select {
	case g.gate <- struct{}{}:
	case <-ctx.Done():
		return window.Snapshot{}, ctx.Err()
	}
	defer func() { <-g.gate }()
	if b, ok := g.Source.(boundedSource); ok && g.max > 0 {
		return b.SnapshotAtMost(ctx, partition, now, g.max)
	}
	return g.Source.Snapshot(ctx, partition, now)
}
