package backtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// HistoryPrecision is what a backtest from history can say, for reports.
const HistoryPrecision = "minute: counts are exact per minute, but every event is taken at its minute's start, " +
	"so windows are summed over whole minutes at each minute's start and deny times are exact to the minute; " +
	"a limit exceeded only by a burst straddling a window's edge inside a minute can be missed, and nothing is denied that was not over its limit"

// historyRules derives the rules minute buckets can answer: limits of a
// minute or more. Token buckets and distinct counts need each event's time
// or values, which history does not keep. It returns what it left out.
func historyRules(set *rules.Set) (*rules.Set, []string) {
	var dropped []string
	out := set.Derive(func(r *rules.Rule) *rules.Rule {
		if r.Distinct != "" {
			dropped = append(dropped, fmt.Sprintf("rule %s: left out (distinct %s: history keeps no values)", r.Name, r.Distinct))
			return nil
		}
		c := *r
		c.Bucket = nil
		if r.Bucket != nil {
			dropped = append(dropped, fmt.Sprintf("rule %s: bucket %s left out (a token bucket needs each event's time)", r.Name, r.Bucket))
		}
		c.Limits = nil
		for _, l := range r.Limits {
			if l.Window < time.Minute {
				dropped = append(dropped, fmt.Sprintf("rule %s: limit %s left out (shorter than a minute)", r.Name, l))
				continue
			}
			c.Limits = append(c.Limits, l)
		}
		if len(c.Limits) == 0 {
			return nil
		}
		return &c
	})
	return out, dropped
}

// HistoryError says that PostgreSQL's history cannot answer the range.
type HistoryError struct{ Reason string }

func (e *HistoryError) Error() string { return "backtest from history: " + e.Reason }

// checkMinutes makes sure the minute tier still holds what the replay
// needs: the roller moves older minutes to coarser buckets.
func checkMinutes(ctx context.Context, q *history.Querier, need time.Time) error {
	tiers, err := q.Tiers(ctx)
	if err != nil {
		return fmt.Errorf("backtest from history: %w", err)
	}
	for _, t := range tiers {
		if t.Step != "1m" {
			continue
		}
		if !t.RolledTo.IsZero() && need.Before(t.RolledTo) {
			return &HistoryError{Reason: fmt.Sprintf("PostgreSQL holds minute buckets only from %s (older minutes were rolled into %s buckets and coarser); "+
				"the replay needs them from %s (the range's start less the warm-up)",
				t.RolledTo.Format(time.RFC3339), coarser(tiers), need.UTC().Format(time.RFC3339))}
		}
		return nil
	}
	return &HistoryError{Reason: "the database holds no history (no ladder stored: has the history group ever run?)"}
}

func coarser(tiers []history.StoredTier) string {
	if len(tiers) > 1 {
		return tiers[1].Step
	}
	return "coarser"
}

// replayHistory replays the minute buckets of [need, cfg.To) into the
// partitions: each row is an event of n at its minute's start, and each
// minute of a partition one tick. Rows go to a partition by the murmur2 of
// their subject as the sets count it (placement), as the limiter's takes
// key them.
func replayHistory(ctx context.Context, cfg *Config, q *history.Querier, sets []*rules.Set, sel []history.ActionKind, need time.Time, parts []*partition) (rows int64, err error) {
	chans := make([]chan []history.MinuteRow, len(parts))
	g, gctx := errgroup.WithContext(ctx)
	for i, p := range parts {
		chans[i] = make(chan []history.MinuteRow, 4)
		ch := chans[i]
		g.Go(func() error { return replayRows(gctx, p, ch) })
	}
	g.Go(func() error {
		defer func() {
			for _, ch := range chans {
				close(ch)
			}
		}()
		pending := make([][]history.MinuteRow, len(parts))
		send := func() error {
			for i, rs := range pending {
				if len(rs) == 0 {
					continue
				}
				select {
				case chans[i] <- rs:
				case <-gctx.Done():
					return gctx.Err()
				}
				pending[i] = nil
			}
			return nil
		}
		var minute time.Time
		err := q.Minutes(gctx, sel, need, cfg.To, func(r history.MinuteRow) error {
			if !r.Minute.Equal(minute) {
				if err := send(); err != nil {
					return err
				}
				minute = r.Minute
			}
			rows++
			i := window.Partition(window.Subject{Action: r.Action, Kind: r.Kind, Subject: placement(sets, r.Kind, r.Subject)}, len(parts))
			pending[i] = append(pending[i], r)
			return nil
		})
		if err != nil {
			return err
		}
		return send()
	})
	return rows, g.Wait()
}

// placement is the subject a history row is placed by: as each set counts
// it (rules.Set.Subject), one after the other. The rows of one counted
// subject (spellings stored before its kind was normalized, the addresses
// of a /64) then share a partition, whose slot counts them together, for
// every set: a partition split would judge each part alone.
func placement(sets []*rules.Set, kind, subject string) string {
	for _, s := range sets {
		if s != nil {
			subject = s.Subject(kind, subject)
		}
	}
	return subject
}

// replayRows applies one partition's rows as they come, a minute a tick.
func replayRows(ctx context.Context, p *partition, ch <-chan []history.MinuteRow) error {
	var offset int64
	for rs := range ch {
		for _, r := range rs {
			ev := event.Event{V: event.Version, Action: r.Action, Kind: r.Kind, Subject: r.Subject, TS: r.Minute, N: r.N}
			if err := p.add(ctx, offset, r.Minute.UnixMilli(), &ev); err != nil {
				return err // the rows end before the range does: never errEnd
			}
			offset++
		}
		p.stats.next.Store(offset)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return p.finish(ctx)
}

// selection lists the actions and kinds the sets' rules count.
func selection(sets ...*rules.Set) []history.ActionKind {
	seen := map[history.ActionKind]bool{}
	var out []history.ActionKind
	for _, s := range sets {
		for _, r := range s.Rules() {
			for _, k := range r.Kinds {
				ak := history.ActionKind{Action: r.Action, Kind: k}
				if !seen[ak] {
					seen[ak] = true
					out = append(out, ak)
				}
			}
		}
	}
	return out
}

var errNoRules = errors.New("backtest from history: no rule has a limit of a minute or more")
