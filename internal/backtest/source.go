package backtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
)

// item is one message as the replay takes it.
type item struct {
	offset int64
	clock  int64 // ms the message moves the replay's clock to (0: not at all)
	ev     event.Event
	ok     bool   // accepted: the live aggregator would count it
	reason string // why not
}

// replayKafka reads one partition's span and replays it: a reader
// goroutine fetches and decodes ahead while the partition applies. The
// partition stops reading once its clock reaches the range's end.
func replayKafka(ctx context.Context, client *kafka.Client, cfg *Config, sp span, p *partition, rejects map[string]int64) error {
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	ch := make(chan []item, 4)
	readErr := make(chan error, 1)
	go func() {
		defer close(ch)
		readErr <- readSpan(rctx, client, cfg, sp, p.stats, ch)
	}()
	err := readPartition(ctx, p, ch, rejects)
	stopReading()
	for range ch { // let the reader end
	}
	rerr := <-readErr
	switch {
	case errors.Is(err, errEnd):
		// Stopped reading on purpose: the reader's cancellation is no error.
		p.stats.next.Store(sp.End)
	case err != nil:
		return err
	case rerr != nil:
		return rerr // what is in hand is incomplete
	}
	return p.finish(ctx)
}

// consume adds the items to the partition until the channel closes or the
// partition's clock reaches the range's end (errEnd).
func readPartition(ctx context.Context, p *partition, ch <-chan []item, rejects map[string]int64) error {
	for items := range ch {
		for i := range items {
			it := &items[i]
			var ev *event.Event
			if it.ok {
				ev = &it.ev
			} else {
				rejects[it.reason]++
			}
			if err := p.add(ctx, it.offset, it.clock, ev); err != nil {
				return err
			}
		}
	}
	return nil
}

// readSpan fetches [sp.Start, sp.End) of a partition, committed records
// only, and hands over each message accepted or refused as the live
// aggregator does (consume.Accept at the clock of the record).
func readSpan(ctx context.Context, client *kafka.Client, cfg *Config, sp span, stats *partStats, out chan<- []item) error {
	f, err := consume.NewFetcher(consume.FetcherConfig{Client: client, Topic: cfg.Topic, Partition: sp.Partition, Offset: sp.Start, MaxBytes: 8 << 20})
	if err != nil {
		return err
	}
	for f.Next() < sp.End {
		before := f.Next()
		msgs, err := f.Fetch(ctx)
		var lost *consume.LostOffsetsError
		if errors.As(err, &lost) {
			return fmt.Errorf("backtest: topic %s partition %d: offsets from %d were deleted (retention) while the backtest read them: backtest a later range, or add --from-history: %w",
				cfg.Topic, sp.Partition, lost.From, lost)
		}
		var unreadable *consume.UnreadableError
		if errors.As(err, &unreadable) {
			// Skipped unread by the live aggregator too (the same Fetcher
			// and bound); the next read goes on past them.
			continue
		}
		if err != nil {
			return fmt.Errorf("backtest: read topic %s partition %d offset %d: %w", cfg.Topic, sp.Partition, f.Next(), err)
		}
		if len(msgs) == 0 && f.Next() == before {
			// Offsets left before the end but nothing to read: transaction
			// markers of an open transaction, which read_committed never
			// passes while it is open.
			break
		}
		items := make([]item, 0, len(msgs))
		for i := range msgs {
			if msgs[i].Offset >= sp.End {
				break
			}
			items = append(items, take(&msgs[i], cfg))
		}
		stats.next.Store(min(f.Next(), sp.End))
		select {
		case out <- items:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	stats.next.Store(sp.End)
	return nil
}

// take accepts or refuses one message. The record's time stands for the
// live aggregator's clock when it read the message: it cannot have read it
// earlier, and keeps up within moments.
func take(m *kafka.Message, cfg *Config) item {
	it := item{offset: m.Offset}
	now := m.Time
	if now.Before(minRecordTime) {
		now = time.Now() // no usable record time: judge as the aggregator would now
	} else if cfg.Clock == ClockRecord {
		it.clock = m.Time.UnixMilli()
	}
	ev, derr := consume.Accept(m, now, cfg.MaxFutureSkew)
	if derr != nil {
		it.reason = derr.Reason
		return it
	}
	if cfg.Clock == ClockEvent {
		it.clock = ev.TS.UnixMilli()
	}
	// The limiter's strict takes (the floodgate-counted header) counted
	// their events in the live Redis: here they are counted with the
	// others, or strict rules would see none of them.
	it.ev, it.ok = ev, true
	return it
}

// minRecordTime: record times before it are unset (-1) or garbage.
var minRecordTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
