package live

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Take entries Redis lost. A Redis primary acknowledges an append before
// its replica has it: a primary that dies then takes the entry with it,
// and the replica promoted in its place never held it. The owner answered
// the take (its overlay still counts it) but the entry's event would never
// reach the events topic: history would miss it, and a next owner's load
// would not see it. So the owner remembers each acknowledged append until
// the apply counts its event (takeGate.acked), notices a stream that went
// back (an append's id not past the last one Redis gave it, or, checked
// every verifyEvery, a last generated id behind it), and appends the
// entries it lost again: once the relay's requests sent before the loss
// can no longer land and the owner has counted up to the partition's end,
// an entry still uncounted is in neither the stream nor the topic.
// Meanwhile the partition's takes fail closed.

// verifyEvery is how often RunTakes checks the streams of the partitions
// with appends not yet counted.
const verifyEvery = 250 * time.Millisecond

// streamID is a Redis stream entry id, "<ms>-<seq>".
type streamID struct{ ms, seq uint64 }

func parseStreamID(s string) (streamID, error) {
	ms, seq, ok := strings.Cut(s, "-")
	m, err1 := strconv.ParseUint(ms, 10, 64)
	q, err2 := strconv.ParseUint(seq, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return streamID{}, fmt.Errorf("stream id %q: want <ms>-<seq>", s)
	}
	return streamID{m, q}, nil
}

func (a streamID) less(b streamID) bool { return a.ms < b.ms || (a.ms == b.ms && a.seq < b.seq) }

func (a streamID) String() string { return fmt.Sprintf("%d-%d", a.ms, a.seq) }

// ackedTake is an appended take event not yet counted by the apply.
type ackedTake struct {
	entry streamID
	enc   string // as appended
	lost  bool   // Redis no longer holds its entry
	again bool   // being appended again
}

// noteAppend records a round Redis acknowledged at id (under p.mu): its
// events are remembered until counted. An id not past the last one Redis
// gave this owner means the stream went back: what was acknowledged at id
// or later is lost.
func (s *Sink) noteAppend(partition int, p *partState, t *takeRound, id streamID) {
	g := &p.takes
	if g.acked == nil {
		g.acked = map[string]*ackedTake{}
	}
	if g.hasAck && !g.lastAck.less(id) {
		s.markLost(partition, p, func(e streamID) bool { return !e.less(id) }, "an append's id ("+id.String()+") is not past the last acknowledged ("+g.lastAck.String()+")")
	}
	g.lastAck, g.hasAck = id, true
	for i, ev := range t.ids {
		// counted already, it needs no remembering (nor a second append)
		if _, ok := g.ov.byID[ev]; ok {
			g.acked[ev] = &ackedTake{entry: id, enc: t.evs[i]}
		}
	}
}

// markLost marks the partition's acknowledged entries gone (under p.mu)
// and closes its takes until they are appended again.
func (s *Sink) markLost(partition int, p *partState, gone func(streamID) bool, why string) {
	n := 0
	for _, a := range p.takes.acked {
		if !a.lost && !a.again && gone(a.entry) {
			a.lost = true
			n++
		}
	}
	if n == 0 {
		return
	}
	if p.takes.lostAt.IsZero() {
		p.takes.lostAt = s.cfg.Now()
	}
	p.closeTakes()
	s.log.Error("owner takes: Redis lost take stream entries it had acknowledged (a failover to a replica that lacked them); the partition's takes fail until they are appended again",
		"partition", partition, "entries", n, "why", why)
}

// verifyStreams checks the take streams of the partitions with appends
// not yet counted: a last generated id behind the last acknowledged one
// is a stream that went back. RunTakes calls it between rounds, so no
// append of this owner lands between the read and the comparison.
func (s *Sink) verifyStreams(ctx context.Context) {
	type check struct {
		partition int
		p         *partState
		cmd       *redis.XInfoStreamCmd
	}
	var checks []check
	s.mu.Lock()
	parts := make(map[int]*partState, len(s.parts))
	for part, p := range s.parts {
		parts[part] = p
	}
	s.mu.Unlock()
	pipe := s.cfg.Takes.Redis.Pipeline()
	for part, p := range parts {
		p.mu.Lock()
		due := p.takes.hasAck && len(p.takes.acked) > 0
		p.mu.Unlock()
		if due {
			checks = append(checks, check{part, p, pipe.XInfoStream(ctx, s.cfg.Applier.keys.Takes(part))})
		}
	}
	if len(checks) == 0 {
		return
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	for _, c := range checks {
		var last streamID
		info, err := c.cmd.Result()
		switch {
		case err != nil && !strings.Contains(err.Error(), "no such key"):
			continue // unknown: checked again next time
		case err == nil:
			if last, err = parseStreamID(info.LastGeneratedID); err != nil {
				continue
			}
		}
		c.p.mu.Lock()
		if last.less(c.p.takes.lastAck) {
			s.markLost(c.partition, c.p, func(e streamID) bool { return last.less(e) }, "the stream's last id ("+last.String()+") is behind the last acknowledged ("+c.p.takes.lastAck.String()+")")
			c.p.takes.lastAck = last
		}
		c.p.mu.Unlock()
	}
}

// recoverLost, on the partition's tick (under p.mu), appends its lost
// entries again once nothing else can count them: the relay's requests
// sent before the loss have landed or failed (relayWait), and the owner
// has counted up to the partition's end read after that. It reports
// whether the partition is recovering (its takes stay closed).
func (s *Sink) recoverLost(ctx context.Context, partition int, p *partState) bool {
	g := &p.takes
	switch {
	case g.lostAt.IsZero():
		return false
	case s.cfg.Now().Sub(g.lostAt) < s.relayWait():
		return true
	case !g.lostEnd:
		// the end as it stands now: any request of the relay's is in it
		g.target = -1
		s.readTarget(ctx, partition, p) // stays closed: lostAt is set
		g.lostEnd = g.target >= 0
		return true
	case g.applied < g.target:
		return true
	}
	t := &takeRound{partition: partition, p: p, epoch: g.epoch, done: make(chan error, 1)}
	for id, a := range g.acked {
		if a.lost {
			a.lost, a.again = false, true
			t.ids, t.evs = append(t.ids, id), append(t.evs, a.enc)
		}
	}
	g.lostAt, g.lostEnd, g.target = time.Time{}, false, -1 // opens on a next tick
	if len(t.evs) == 0 {
		return false
	}
	p.appends.Add(1)
	select {
	case s.rounds <- t:
	default:
		p.appends.Done()
		t.done <- errors.New("owner takes: the rounds' queue is full")
	}
	go s.settleReappend(partition, t)
	return true
}

// settleReappend waits for a round of lost entries: appended, they are
// remembered as any append is (noteAppend); failed, they are lost again,
// and retried.
func (s *Sink) settleReappend(partition int, t *takeRound) {
	p := t.p
	var err error
	select {
	case err = <-t.done:
	case <-p.stopped:
		err = errNotAppended
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, id := range t.ids {
		a := p.takes.acked[id]
		switch {
		case a == nil || !a.again:
			// counted, or appended and remembered again
		case err == nil:
			delete(p.takes.acked, id) // appended; no window needs it
		default:
			a.again, a.lost = false, true
			n++
		}
	}
	if err == nil {
		s.m.takesLost.WithLabelValues("appended_again").Add(float64(len(t.evs)))
		s.log.Info("owner takes: lost take stream entries appended again", "partition", partition, "entries", len(t.evs))
		return
	}
	if n > 0 && p.takes.lostAt.IsZero() {
		p.takes.lostAt = s.cfg.Now().Add(-s.relayWait()) // none of the relay's requests holds them
		p.closeTakes()
	}
	s.log.Warn("owner takes: appending lost take stream entries again failed; retrying", "partition", partition, "entries", n, "err", err)
}

// relayWait is how long a take relay's produce request may still land
// after it was sent.
func (s *Sink) relayWait() time.Duration {
	return s.cfg.TakeRelay.cfg.ProduceTimeout * 3 / 2
}

// dropLost reports, loudly, the lost entries a partition leaves unappended
// as it goes (its revoke): their events reach no topic.
func (s *Sink) dropLost(partition int, p *partState) {
	p.mu.Lock()
	n := 0
	for _, a := range p.takes.acked {
		if a.lost || a.again {
			n++
		}
	}
	p.mu.Unlock()
	if n > 0 {
		s.m.takesLost.WithLabelValues("dropped").Add(float64(n))
		s.log.Error("owner takes: take events Redis lost were not appended again before the partition left this owner: history misses them, and its next owner does not count them",
			"partition", partition, "entries", n)
	}
}
