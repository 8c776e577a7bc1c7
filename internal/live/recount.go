package live

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/consume"
)

// A partition whose slot Redis lost (a restart without persistence, a
// failover before anything was replicated) is counted again from the log,
// as far back as the longest window reaches: its windows come back whole
// instead of starting empty. The group finds where (consume.Recounter);
// the sink counts the events the limiter had counted in the lost slot
// (event.HeaderCounted) like any other, up to the partition's end when the
// loss was found. That end is kept in the slot, so an owner that takes the
// partition over mid-recount counts them too.

var _ consume.Recounter = (*Sink)(nil)

// recountSlack is added to the longest window: events stamped a little
// before their log time still count.
const recountSlack = time.Minute

// recountTTL bounds the life of a recount's end in Redis: a recount of
// the longest window (a day) is long done by then.
const recountTTL = 7 * 24 * time.Hour

// RecountSince implements consume.Recounter.
func (s *Sink) RecountSince() time.Duration {
	return s.cfg.Rules().MaxWindow() + recountSlack
}

// Recount implements consume.Recounter: what the partition's memory held
// goes, its takes wait until the recount reaches the partition's end, and
// the events the limiter counted before to are counted again.
func (s *Sink) Recount(ctx context.Context, topic string, partition int, from, to int64) error {
	key := s.cfg.Applier.keys.Recount(s.cfg.Group, topic, partition)
	pipe := s.cfg.Applier.rdb.Pipeline()
	pipe.Set(ctx, key, to, recountTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("recount partition %d: write its end: %w", partition, err)
	}
	p := s.part(partition)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hr != nil {
		p.hr.drop()
		p.hr.held = false // the recount's first batch finds no offset, rightly
	}
	p.recountTo = to
	select {
	case <-p.reread: // asked before: the recount reads the partition again
	default:
	}
	p.closeTakes()
	p.takes.applied = from
	s.mu.Lock()
	s.had[partition] = false
	s.mu.Unlock()
	return nil
}

// readRecount reads where a recount of the partition runs to (-1: none).
func (s *Sink) readRecount(ctx context.Context, topic string, partition int) (int64, error) {
	key := s.cfg.Applier.keys.Recount(s.cfg.Group, topic, partition)
	pipe := s.cfg.Applier.rdb.Pipeline()
	get := pipe.Get(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return -1, fmt.Errorf("read %s: %w", key, err)
	}
	to, err := get.Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return -1, nil
	case err != nil:
		return -1, fmt.Errorf("read %s: %w", key, err)
	}
	return to, nil
}

// recounted returns b with the events the limiter counted in the slot
// lost (before p.recountTo) marked uncounted, so they are counted again
// (under p.mu). The batch's records are copied: the group owns them.
func (s *Sink) recounted(b consume.Batch, p *partState) consume.Batch {
	if p.recountTo <= b.First {
		if p.recountTo >= 0 {
			s.log.Info("recount done: the partition is counted again up to where its slot was lost", "partition", b.Partition, "to", p.recountTo)
			p.recountTo = -1
		}
		return b
	}
	var recs []consume.Record
	for i, r := range b.Records {
		if r.Counted && r.Offset < p.recountTo {
			if recs == nil {
				recs = append([]consume.Record(nil), b.Records...)
			}
			recs[i].Counted = false
		}
	}
	if recs != nil {
		b.Records = recs
	}
	return b
}

// slotLost turns the applier's errSlotLost into the group's recount.
func (s *Sink) slotLost(b consume.Batch, err error) error {
	s.m.offsetMissing.WithLabelValues(strconv.Itoa(b.Partition)).Inc()
	return &consume.RewindError{Topic: b.Topic, Partition: b.Partition, First: b.First, Recount: true, Reason: err.Error()}
}
