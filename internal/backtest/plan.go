package backtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/topics"
)

// RetentionError says that the topic no longer holds what a backtest
// needs: retention (or DeleteRecords) removed the first Deleted offsets of
// a partition, and what it still holds starts after Need.
type RetentionError struct {
	Topic     string
	Partition int
	// Need is where the replay has to start: the range's start less the
	// warm-up.
	Need time.Time
	// Deleted is the partition's log start offset: offsets 0..Deleted-1
	// are gone.
	Deleted int64
	// Held is the time of the first record the partition holds (zero when
	// it holds none).
	Held time.Time
	// Earliest is the earliest range start the partition can answer with
	// the same warm-up (zero when it holds none).
	Earliest time.Time
}

func (e *RetentionError) Error() string {
	held, then := "it holds no records any more", "backtest a later range"
	if !e.Held.IsZero() {
		held = "its first record is of " + e.Held.UTC().Format(time.RFC3339)
		then = "backtest from " + e.Earliest.UTC().Format(time.RFC3339) + " or later (the warm-up before the range must lie in what the topic holds)"
	}
	return fmt.Sprintf("topic %s partition %d no longer holds the events the backtest needs from %s (offsets 0..%d were deleted by retention; %s): "+
		"%s, or add --from-history to replay PostgreSQL's minute counts instead",
		e.Topic, e.Partition, e.Need.UTC().Format(time.RFC3339), e.Deleted-1, held, then)
}

// span is the part of one partition a replay reads: offsets [Start, End).
type span struct {
	Partition  int
	Start, End int64
}

// plan finds, per partition, the offsets from the first record at or after
// need (Kafka's time index) to the first at or after to (or the log's
// stable end), and refuses when retention removed records the replay
// needs: a partition whose log start moved (records were deleted) and whose
// first remaining record is after need.
func plan(ctx context.Context, client *kafka.Client, topic string, need, to time.Time, warmUp time.Duration, clock Clock) ([]span, error) {
	parts, err := topics.PartitionIDs(ctx, client, topic)
	if err != nil {
		return nil, fmt.Errorf("backtest: %w", err)
	}
	first, end, err := bounds(ctx, client, topic, parts)
	if err != nil {
		return nil, err
	}
	startAt, err := timeOffsets(ctx, client, topic, parts, need)
	if err != nil {
		return nil, err
	}
	// On the event clock, a record published at or after to may hold an
	// event of before it: read to the log's end (the replay stops once its
	// clock reaches to).
	endAt := map[int]int64{}
	if clock == ClockRecord {
		if endAt, err = timeOffsets(ctx, client, topic, parts, to); err != nil {
			return nil, err
		}
	}
	spans := make([]span, 0, len(parts))
	for _, p := range parts {
		sp := span{Partition: p, Start: startAt[p], End: end[p]}
		if sp.Start < 0 { // no record at or after need
			sp.Start = end[p]
		}
		if e, ok := endAt[p]; ok && e >= 0 && e < end[p] {
			sp.End = e
		}
		sp.Start = max(sp.Start, first[p])
		if first[p] > 0 && sp.Start == first[p] {
			// Records were deleted, and none of those held is before need:
			// the deleted ones may have been needed.
			held, err := firstTime(ctx, client, topic, p, first[p], end[p])
			if err != nil {
				return nil, err
			}
			if held.IsZero() || held.After(need) {
				e := &RetentionError{Topic: topic, Partition: p, Need: need, Deleted: first[p], Held: held}
				if !held.IsZero() {
					e.Earliest = held.Add(warmUp + time.Second - 1).Truncate(time.Second)
				}
				return nil, e
			}
		}
		spans = append(spans, sp)
	}
	return spans, nil
}

// bounds returns each partition's log start and stable end (what
// read_committed readers reach).
func bounds(ctx context.Context, client *kafka.Client, topic string, parts []int) (first, end map[int]int64, err error) {
	reqs := make([]kafka.OffsetRequest, 0, 2*len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}, IsolationLevel: kafka.ReadCommitted})
	if err != nil {
		return nil, nil, fmt.Errorf("backtest: log bounds of topic %s: %w", topic, err)
	}
	first, end = map[int]int64{}, map[int]int64{}
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, nil, fmt.Errorf("backtest: log bounds of topic %s partition %d: %w", topic, po.Partition, po.Error)
		}
		first[po.Partition], end[po.Partition] = po.FirstOffset, po.LastOffset
	}
	for _, p := range parts {
		if _, ok := end[p]; !ok {
			return nil, nil, fmt.Errorf("backtest: log bounds of topic %s: partition %d not in the answer", topic, p)
		}
	}
	return first, end, nil
}

// timeOffsets returns each partition's first offset whose record time is
// at or after at (Kafka's time index), -1 when there is none.
func timeOffsets(ctx context.Context, client *kafka.Client, topic string, parts []int, at time.Time) (map[int]int64, error) {
	reqs := make([]kafka.OffsetRequest, 0, len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafka.TimeOffsetOf(p, at))
	}
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}, IsolationLevel: kafka.ReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("backtest: offsets of topic %s at %s: %w", topic, at.UTC().Format(time.RFC3339), err)
	}
	out := map[int]int64{}
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("backtest: offsets of topic %s partition %d at %s: %w", topic, po.Partition, at.UTC().Format(time.RFC3339), po.Error)
		}
		out[po.Partition] = -1
		for off := range po.Offsets {
			out[po.Partition] = off
		}
	}
	return out, nil
}

// firstTime returns the record time of the first record at or after
// offset (zero when the partition holds none before end).
func firstTime(ctx context.Context, client *kafka.Client, topic string, partition int, offset, end int64) (time.Time, error) {
	if offset >= end {
		return time.Time{}, nil
	}
	f, err := consume.NewFetcher(consume.FetcherConfig{Client: client, Topic: topic, Partition: partition, Offset: offset, MaxBytes: 64 << 10})
	if err != nil {
		return time.Time{}, err
	}
	for f.Next() < end {
		before := f.Next()
		msgs, err := f.Fetch(ctx)
		var lost *consume.LostOffsetsError
		if errors.As(err, &lost) && !lost.Beyond {
			f.SetOffset(lost.To) // retention moved on meanwhile
			continue
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("backtest: read the first record of topic %s partition %d: %w", topic, partition, err)
		}
		if len(msgs) > 0 {
			return msgs[0].Time, nil
		}
		if f.Next() == before {
			break // nothing but an empty long poll: no record to read
		}
	}
	return time.Time{}, nil
}
