package live

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// resumeTakes readies a resumed partition's takes (under p.mu): the take
// stream's owner takes join the overlay — answered by the last owner,
// perhaps not yet published, so not in the log this owner replays — and
// takes are answered once this owner has counted up to the partition's
// end as it stands after that load.
func (s *Sink) resumeTakes(ctx context.Context, topic string, partition int, p *partState, next int64) {
	p.takes.topic = topic
	p.closeTakes()
	p.takes.applied = next
	if p.takes.fenced {
		return // a newer owner answers them
	}
	if p.takes.ov == nil {
		p.takes.ov = newOverlay()
		epoch, err := s.fenceTakes(ctx, partition)
		if err == nil {
			err = s.loadOverlay(ctx, partition, p.takes.ov)
		}
		if err != nil {
			// answered only once the load succeeds: a later resume, or
			// the reopen tick
			p.takes.ov = nil
			s.log.Warn("owner takes: loading the take stream failed; the partition's takes fail until it succeeds", "partition", partition, "err", err)
			return
		}
		p.takes.epoch.Store(epoch)
		p.takes.held = epoch
		s.takeOverLost(ctx, partition, p)
	}
	s.refreshBans(ctx, partition, p)
	s.readTarget(ctx, partition, p)
}

// readBans reads the partition's bans, by subject field.
func (s *Sink) readBans(ctx context.Context, partition int) (map[string]*window.Ban, error) {
	key := s.cfg.Applier.keys.Bans(partition)
	h, err := s.cfg.Takes.Redis.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	bans := make(map[string]*window.Ban, len(h))
	for f, js := range h {
		b, err := window.ParseBan([]byte(js))
		if err != nil {
			return nil, fmt.Errorf("read %s: %s: %w", key, f, err)
		}
		bans[f] = b
	}
	return bans, nil
}

// refreshBans reads the partition's bans into p (under p.mu). A failure
// keeps the last ones; takes fail once they are maxBanAge old.
func (s *Sink) refreshBans(ctx context.Context, partition int, p *partState) {
	bans, err := s.readBans(ctx, partition)
	if err != nil {
		s.log.Warn("owner takes: reading the partition's bans failed; its takes fail once the last read is old", "partition", partition, "err", err, "max_age", maxBanAge)
		return
	}
	p.takes.bans, p.takes.bansAt = bans, s.cfg.Now()
}

//go:embed takefence.lua
var takeFenceBody string

var takeFenceScript = redis.NewScript("#!lua\n" + takeFenceBody)

// fenceTakes moves the partition's take stream past every id it generated
// and returns the epoch this owner's appends use (takefence.lua): a former
// owner's appends fail from now on, so the load that follows holds every
// take it answered.
func (s *Sink) fenceTakes(ctx context.Context, partition int) (int64, error) {
	key := s.cfg.Applier.keys.Takes(partition)
	epoch, err := takeFenceScript.Run(ctx, s.cfg.Takes.Redis, []string{key}).Int64()
	if err != nil {
		return 0, fmt.Errorf("fence %s: %w", key, err)
	}
	return epoch, nil
}

// loadOverlay adds the take stream's owner takes to ov, as of now.
func (s *Sink) loadOverlay(ctx context.Context, partition int, ov *overlay) error {
	key := s.cfg.Applier.keys.Takes(partition)
	msgs, err := s.cfg.Takes.Redis.XRange(ctx, key, "-", "+").Result()
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	sec := floorDiv(s.cfg.Now().UnixMilli(), 1000)
	for _, m := range msgs {
		for field, v := range m.Values {
			str, _ := v.(string)
			if len(field) < 2 || field[:1] != ownerTakeField {
				continue // a limiter's take (stage A): counted in Redis
			}
			_, value, err := window.ParseQueuedEvent(str)
			if err != nil {
				continue // the relay drops it, loudly
			}
			ev, err := event.Decode(value)
			if err != nil {
				continue
			}
			sub := window.Subject{Action: ev.Action, Kind: ev.Kind, Subject: ev.Subject}
			// at its own second, which the take counted at (its event's
			// time), or now if that is ahead
			at := min(floorDiv(ev.TS.UnixMilli(), 1000), sec)
			ov.add(sub, inflight{id: ev.ID, sec: at, n: max(ev.N, 1)})
		}
	}
	return nil
}

// readTarget reads the end offset the partition must be counted up to
// before its takes are answered, and opens them if it is.
func (s *Sink) readTarget(ctx context.Context, partition int, p *partState) {
	first, end, err := s.cfg.Takes.Bounds(ctx, p.takes.topic, partition)
	if err != nil {
		s.log.Warn("owner takes: reading the partition's end offset failed; its takes fail until it succeeds", "partition", partition, "err", err)
		return
	}
	if p.takes.applied < 0 {
		// never applied: the group reads from the log's first offset
		p.takes.applied = first
	}
	p.takes.target = end
	p.takes.open = !p.takes.fenced && p.takes.epoch.Load() != 0 && p.takes.applied >= end
}

// takesApplied follows an applied batch (under p.mu): its take events'
// overlay entries go, counted now, and a partition catching up opens once
// it reaches its target. A failed batch closes the takes.
func (s *Sink) takesApplied(ctx context.Context, b consume.Batch, p *partState, err error) {
	if err != nil {
		p.closeTakes()
		return
	}
	if ov := p.takes.ov; ov != nil {
		for i := range b.Records {
			if r := &b.Records[i]; r.Take {
				ov.drop(r.Event.ID)
				delete(p.takes.acked, r.Event.ID)
			}
		}
	}
	p.takes.applied = b.Next()
	switch {
	case p.takes.open || p.takes.fenced || p.takes.epoch.Load() == 0:
	case p.takes.ov == nil || p.takes.target < 0:
		// read on the reopen tick, not on the batch path
	case p.takes.applied >= p.takes.target:
		p.takes.open = true
	}
}

// reopenTakes, on the partition's tick, reads its bans again, sweeps its
// overlay of expired takes once a second, and retries what a closed gate
// waits for: the overlay's load, the target's read.
func (s *Sink) reopenTakes(ctx context.Context, topic string, partition int, p *partState) {
	if s.cfg.Takes == nil {
		return
	}
	// Redis outside the lock: the partition's batches and takes go on
	bans, berr := s.readBans(ctx, partition)
	if berr != nil && ctx.Err() == nil {
		s.log.Warn("owner takes: reading the partition's bans failed; its takes fail once the last read is old", "partition", partition, "err", berr, "max_age", maxBanAge)
	}
	if s.advertise(p) {
		key := s.cfg.Applier.keys.TakesOwner(partition)
		if err := s.cfg.Takes.Redis.Set(ctx, key, s.cfg.Takes.Advertise, ownerRecordTTL).Err(); err != nil && ctx.Err() == nil {
			s.log.Warn("owner takes: writing the partition's owner record failed; takes forwarded here may fail until it is written", "partition", partition, "err", err)
		}
	}
	s.refenceTakes(ctx, partition, p)
	read := s.readForDoubts(ctx, topic, partition, p)
	p.mu.Lock()
	defer p.mu.Unlock()
	if berr == nil {
		p.takes.bans, p.takes.bansAt = bans, s.cfg.Now()
	}
	if p.takes.topic == "" {
		p.takes.topic = topic
	}
	if sec := floorDiv(s.cfg.Now().UnixMilli(), 1000); p.takes.ov != nil && sec != p.takes.swept {
		p.takes.ov.sweep(sec - int64(rules.MaxWindow/time.Second))
		for id, a := range p.takes.acked {
			if _, ok := p.takes.ov.byID[id]; !ok && a.doubt == appended {
				delete(p.takes.acked, id) // expired: no window needs it, the relay publishes it
			}
		}
		p.takes.swept = sec
		s.m.inflight.WithLabelValues(strconv.Itoa(partition)).Set(float64(len(p.takes.ov.byID)))
	}
	if !p.takes.fenced {
		s.settleDoubts(partition, p, read)
	}
	switch {
	case p.takes.open || p.takes.fenced:
	case p.takes.ov == nil:
		s.resumeTakes(ctx, topic, partition, p, p.takes.applied)
	case p.takes.target < 0:
		s.readTarget(ctx, partition, p)
	}
}

// advertise tells whether the partition's owner record is due: its takes
// are answered here and the record was last written a second ago or more.
func (s *Sink) advertise(p *partState) bool {
	if s.cfg.Takes.Advertise == "" {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	sec := floorDiv(s.cfg.Now().UnixMilli(), 1000)
	if !p.takes.open || sec == p.takes.advertised {
		return false
	}
	p.takes.advertised = sec
	return true
}
