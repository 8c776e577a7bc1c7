package live

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// Appends in doubt. The overlay counts a take from its admission until the
// apply counts its event, so the owner's windows never miss it; but the
// event must reach the events topic once, and the overlay must not count a
// take that never will. Two kinds of append leave that in doubt:
//
//   - lost: Redis acknowledged it, then a failover to a replica that lacked
//     it took it away. The owner notices a stream that went back (an
//     append's id not past the last one Redis gave it, or, checked every
//     verifyEvery, a last generated id behind it).
//   - uncertain: the append failed without Redis's answer (a timeout, a
//     connection cut). Its take was answered failed, closed.
//
// Each is settled once nothing else can decide it: the relay's produce
// requests sent before the doubt arose can no longer land (relayWait), the
// take stream has been read and what it still holds of them taken back
// (takeBack), and the owner has counted up to the partition's end as it
// stood after that. An entry still uncounted then is in neither the topic
// nor the stream: a lost one, or one taken back, is appended again; an
// uncertain one never landed and leaves the overlay (its take was never
// admitted). The partition's takes go on meanwhile: the overlay counts
// every doubtful take until it is settled.

// verifyEvery is how often RunTakes checks the streams of the partitions
// with appends not yet counted.
const verifyEvery = 250 * time.Millisecond

// doubt is what an owner knows of an append not yet counted.
type doubt uint8

const (
	appended  doubt = iota // Redis acknowledged it and holds it
	lost                   // Redis acknowledged it and no longer holds it
	uncertain              // no answer came
	again                  // lost, being appended again
)

// ackedTake is a take event appended, or maybe appended, and not yet
// counted by the apply.
type ackedTake struct {
	entry streamID // the entry's id when acknowledged (zero: unknown)
	enc   string   // as appended
	doubt doubt
	since time.Time // when the doubt arose
}

// noteAppend records a round Redis acknowledged at id (under p.mu): its
// events are remembered until counted. An id not past the last one Redis
// gave this owner means the stream went back: what was acknowledged at id
// or later is lost, and so is this round, whose id may be one the take
// relay's cursor has passed (as is any round sent before a new epoch).
func (s *Sink) noteAppend(partition int, p *partState, t *takeRound, id streamID) {
	g := &p.takes
	if g.epoch.Load() != 0 && g.hasAck && !g.lastAck.less(id) {
		s.wentBack(partition, p, func(e streamID) bool { return !e.less(id) }, "an append's id ("+id.String()+") is not past the last acknowledged ("+g.lastAck.String()+")")
	}
	if g.epoch.Load() == 0 {
		s.remember(p, t, ackedTake{doubt: lost, since: s.cfg.Now()})
		return
	}
	g.lastAck, g.hasAck = id, true
	s.remember(p, t, ackedTake{entry: id})
}

// wentBack handles a take stream that went back (under p.mu): the entries
// gone are lost, and no take is answered until the stream has a new epoch
// past every id it gave (refenceTakes).
func (s *Sink) wentBack(partition int, p *partState, gone func(streamID) bool, why string) {
	s.markLost(partition, p, gone, why)
	p.takes.epoch.Store(0)
	p.closeTakes()
}

// refenceTakes, on the partition's tick, gives a stream that went back a
// new epoch (outside the partition's lock: the fence is a script run).
func (s *Sink) refenceTakes(ctx context.Context, partition int, p *partState) {
	p.mu.Lock()
	due := p.takes.ov != nil && !p.takes.fenced && p.takes.epoch.Load() == 0 // loaded, and went back since
	p.mu.Unlock()
	if !due {
		return
	}
	epoch, err := s.fenceTakes(ctx, partition)
	if err != nil {
		s.log.Warn("owner takes: a new epoch for a take stream that went back failed; its takes wait", "partition", partition, "err", err)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.takes.epoch.Store(epoch)
	p.takes.held = epoch
	p.takes.hasAck = false // ids start again past the new epoch
}

// remember keeps a round's events in acked as a (under p.mu), those the
// apply has not counted yet: a counted one needs neither remembering nor a
// second append.
func (s *Sink) remember(p *partState, t *takeRound, a ackedTake) {
	g := &p.takes
	if g.acked == nil {
		g.acked = map[string]*ackedTake{}
	}
	for i, ev := range t.ids {
		if _, ok := g.ov.byID[ev]; ok {
			e := a
			e.enc = t.evs[i]
			g.acked[ev] = &e
		}
	}
	if a.doubt != appended && (g.doubtAt.IsZero() || a.since.Before(g.doubtAt)) {
		g.doubtAt = a.since
	}
}

// appendFailed settles a round Redis did not acknowledge (under p.mu): an
// error Redis replied leaves nothing appended, so its takes leave the
// overlay; any other may have landed, and is settled later.
func (s *Sink) appendFailed(p *partState, t *takeRound, err error) {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		for _, ev := range t.ids {
			p.takes.ov.drop(ev)
		}
		return
	}
	s.remember(p, t, ackedTake{doubt: uncertain, since: s.cfg.Now()})
}

// markLost marks the partition's acknowledged entries gone (under p.mu).
func (s *Sink) markLost(partition int, p *partState, gone func(streamID) bool, why string) {
	n, now := 0, s.cfg.Now()
	for _, a := range p.takes.acked {
		if a.doubt == appended && gone(a.entry) {
			a.doubt, a.since = lost, now
			n++
		}
	}
	if n == 0 {
		return
	}
	if p.takes.doubtAt.IsZero() {
		p.takes.doubtAt = now
	}
	s.log.Error("owner takes: Redis lost take stream entries it had acknowledged (a failover to a replica that lacked them); they are appended again, at a new epoch, once nothing else can count them",
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
	s.mu.Lock()
	parts := make(map[int]*partState, len(s.parts))
	for part, p := range s.parts {
		parts[part] = p
	}
	s.mu.Unlock()
	var checks []check
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
		if c.p.takes.epoch.Load() != 0 && last.less(c.p.takes.lastAck) {
			s.wentBack(c.partition, c.p, func(e streamID) bool { return last.less(e) }, "the stream's last id ("+last.String()+") is behind the last acknowledged ("+c.p.takes.lastAck.String()+")")
		}
		c.p.mu.Unlock()
	}
}

// doubtsRead is what settling appends in doubt reads, outside the
// partition's lock: when it read the take stream (and took back what it
// held of them), and the partition's end after.
type doubtsRead struct {
	at  time.Time
	end int64
}

// readForDoubts reads the take stream and the partition's end when appends
// have been in doubt for relayWait and were not read for yet (nil
// otherwise, or on an error: read again on the next tick).
func (s *Sink) readForDoubts(ctx context.Context, topic string, partition int, p *partState) *doubtsRead {
	p.mu.Lock()
	due := !p.takes.doubtAt.IsZero() && p.takes.doubtRead.IsZero() && s.cfg.Now().Sub(p.takes.doubtAt) >= s.relayWait()
	p.mu.Unlock()
	if !due {
		return nil
	}
	at := s.cfg.Now()
	entries, err := s.streamEvents(ctx, partition)
	if err != nil {
		s.log.Warn("owner takes: reading the take stream to settle appends in doubt failed; retrying", "partition", partition, "err", err)
		return nil
	}
	if err := s.takeBack(ctx, partition, p, at, entries); err != nil {
		s.log.Warn("owner takes: taking back the appends in doubt the take stream holds failed; retrying", "partition", partition, "err", err)
		return nil
	}
	// after the take-back: what the relay published before it is counted
	// by the time the owner reaches this end
	_, end, err := s.cfg.Takes.Bounds(ctx, topic, partition)
	if err != nil {
		s.log.Warn("owner takes: reading the partition's end to settle appends in doubt failed; retrying", "partition", partition, "err", err)
		return nil
	}
	return &doubtsRead{at: at, end: end}
}

//go:embed takeback.lua
var takeBackBody string

var takeBackScript = redis.NewScript("#!lua\n" + takeBackBody)

// takeBack deletes from the take stream the entries that hold appends in
// doubt due to be settled at a read at (entries: the stream's events by
// id, their entry ids). A relay publishes an entry within moments; one
// still uncounted a relayWait after its doubt arose is one it may have
// passed: a lost append the stream holds landed at an id that came again
// after the stream went back (so may one without an answer, sent as it
// went back), and the relay, going on from what it published, would never
// publish it. Deleted (takeback.lua), its events are appended again at the
// epoch the stream has then, unless the relay had published it, and then
// they are counted before the settling. An entry in a produce request the
// relay's cursor notes stays, and its appends are settled on a later
// read, once the request has landed or failed.
func (s *Sink) takeBack(ctx context.Context, partition int, p *partState, at time.Time, entries map[string]string) error {
	cut := at.Add(-s.relayWait())
	due := map[string]bool{}
	p.mu.Lock()
	for id, a := range p.takes.acked {
		if e, ok := entries[id]; ok && (a.doubt == lost || a.doubt == uncertain) && !a.since.After(cut) {
			due[e] = true
		}
	}
	p.mu.Unlock()
	if len(due) == 0 {
		return nil
	}
	// taken: the entries each script run answered for (the ones out of
	// the stream now false, the ones kept for their request true)
	taken, err := s.runTakeBack(ctx, partition, due)
	p.mu.Lock()
	defer p.mu.Unlock()
	n, inRequests := 0, 0
	for id, e := range entries {
		keep, ok := taken[e]
		a := p.takes.acked[id]
		switch {
		case !ok || a == nil:
			// not taken back, or counted meanwhile: published before
			continue
		case keep:
			if a.doubt == lost || a.doubt == uncertain {
				a.since = at // settled once the request is
			}
			inRequests++
			continue
		case a.doubt != lost && a.doubt != again:
			// landed after all (or of the same round as one that
			// did): appended again as a lost one is
			a.doubt, a.since = lost, cut
		}
		n++
	}
	if n > 0 {
		s.m.takeDoubts.WithLabelValues("taken_back").Add(float64(n))
		s.log.Warn("owner takes: appends in doubt the take stream still held, which the take relay may have passed (at ids that came again); taken back, to be appended again", "partition", partition, "events", n, "in_requests", inRequests)
	}
	return err
}

// maxTakeBack bounds the entries of one takeback.lua run, so that a
// partition with many appends in doubt does not hold Redis for long.
const maxTakeBack = 1000

// runTakeBack runs takeback.lua over the due entries, maxTakeBack at a
// time, and returns what each run that succeeded answered, by entry: true
// for one kept (a noted request holds it), false for one no longer in the
// stream. On an error it returns what the runs before it did.
func (s *Sink) runTakeBack(ctx context.Context, partition int, due map[string]bool) (map[string]bool, error) {
	keys := s.cfg.Applier.keys
	script := []string{keys.Takes(partition), keys.TakesRelay(partition), keys.TakesRefunds(partition)}
	taken := make(map[string]bool, len(due))
	args := make([]any, 0, min(len(due), maxTakeBack))
	run := func() error {
		kept, err := takeBackScript.Run(ctx, s.cfg.Takes.Redis, script, args...).StringSlice()
		if err != nil {
			return fmt.Errorf("take back %d entries: %w", len(args), err)
		}
		for _, e := range args {
			taken[e.(string)] = false
		}
		for _, e := range kept {
			taken[e] = true
		}
		args = args[:0]
		return nil
	}
	for e := range due {
		if args = append(args, e); len(args) == maxTakeBack {
			if err := run(); err != nil {
				return taken, err
			}
		}
	}
	if len(args) > 0 {
		if err := run(); err != nil {
			return taken, err
		}
	}
	return taken, nil
}

// settleDoubts, on the partition's tick (under p.mu), settles the appends
// in doubt since relayWait before the take stream was read (read, once
// readForDoubts has): once the owner has counted up to the partition's end
// read after the stream, it appends the lost entries (and those taken
// back) again and drops the uncertain ones the stream did not hold.
func (s *Sink) settleDoubts(partition int, p *partState, read *doubtsRead) {
	g := &p.takes
	if g.doubtAt.IsZero() {
		return
	}
	if g.doubtRead.IsZero() {
		if read != nil {
			g.doubtRead, g.doubtEnd = read.at, read.end
		}
		return
	}
	if g.applied < g.doubtEnd {
		return
	}
	cut := g.doubtRead.Add(-s.relayWait())
	t := &takeRound{partition: partition, p: p, done: make(chan error, 1)}
	dropped := 0
	g.doubtAt = time.Time{}
	for id, a := range g.acked {
		switch {
		case a.doubt == appended || a.doubt == again:
		case a.since.After(cut):
			// arose after the read began: the next round settles it
			if g.doubtAt.IsZero() || a.since.Before(g.doubtAt) {
				g.doubtAt = a.since
			}
		case a.doubt == lost:
			a.doubt = again
			t.ids, t.evs = append(t.ids, id), append(t.evs, a.enc)
		default:
			delete(g.acked, id)
			g.ov.drop(id) // never appended: its take was answered failed
			dropped++
		}
	}
	g.doubtRead = time.Time{}
	s.m.takeDoubts.WithLabelValues("not_appended").Add(float64(dropped))
	// logged even when all were counted meanwhile: a doubt arose, and ends
	s.log.Info("owner takes: appends in doubt settled", "partition", partition, "lost", len(t.evs), "not_appended", dropped)
	if len(t.evs) > 0 {
		s.appendAgain(partition, t)
	}
}

// streamEvents are the ids of the events the partition's take stream
// holds, with the ids of their entries.
func (s *Sink) streamEvents(ctx context.Context, partition int) (map[string]string, error) {
	key := s.cfg.Applier.keys.Takes(partition)
	msgs, err := s.cfg.Takes.Redis.XRange(ctx, key, "-", "+").Result()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	seen := map[string]string{}
	for _, m := range msgs {
		for _, v := range m.Values {
			str, _ := v.(string)
			if _, value, err := window.ParseQueuedEvent(str); err == nil {
				if ev, err := event.Decode(value); err == nil {
					seen[ev.ID] = m.ID
				}
			}
		}
	}
	return seen, nil
}

// appendAgain queues a round of lost entries (under p.mu) and settles it
// when it has run.
func (s *Sink) appendAgain(partition int, t *takeRound) {
	t.p.appends.Add(1)
	select {
	case s.rounds <- t:
	default:
		t.p.appends.Done()
		t.done <- errors.New("owner takes: the rounds' queue is full")
	}
	go s.settleAgain(partition, t)
}

// settleAgain waits for a round of lost entries: appended, they are
// remembered as any append is (noteAppend); failed, they are lost again,
// and retried.
func (s *Sink) settleAgain(partition int, t *takeRound) {
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
		case a == nil || a.doubt != again:
			// counted, or appended and remembered anew
		case err == nil:
			delete(p.takes.acked, id) // appended; no window needs it
		default:
			// lost still; no relay request can hold it: settled next tick
			a.doubt, a.since = lost, s.cfg.Now().Add(-s.relayWait())
			if p.takes.doubtAt.IsZero() || a.since.Before(p.takes.doubtAt) {
				p.takes.doubtAt = a.since
			}
			n++
		}
	}
	if err == nil {
		s.m.takeDoubts.WithLabelValues("appended_again").Add(float64(len(t.evs)))
		s.log.Info("owner takes: lost take stream entries appended again", "partition", partition, "entries", len(t.evs))
		return
	}
	s.log.Warn("owner takes: appending lost take stream entries again failed; retrying", "partition", partition, "entries", n, "err", err)
}

// relayWait is how long a take relay's produce request may still land
// after it was sent.
func (s *Sink) relayWait() time.Duration {
	return s.cfg.TakeRelay.cfg.ProduceTimeout * 3 / 2
}

//go:embed takehandover.lua
var takeHandOverBody string

var takeHandOverScript = redis.NewScript("#!lua\n" + takeHandOverBody)

// handOverLost leaves the lost entries a partition has not appended again
// as it goes (its revoke) to the partition's next owner, in the slot's
// hand-over hash, unless a newer owner fenced the stream already
// (takehandover.lua). The next owner's load counts them in its overlay and
// settles them as doubts of its own (takeOverLost). What cannot be handed
// over is dropped, loudly: its event reaches no topic.
func (s *Sink) handOverLost(ctx context.Context, partition int, p *partState) {
	p.mu.Lock()
	pending := len(p.takes.acked)
	p.mu.Unlock()
	if s.cfg.Takes == nil || pending == 0 {
		return // nothing appended and uncounted: nothing to hand over
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A loss not noticed yet (the stream check runs every verifyEvery)
	// would go with this owner: an appended entry the stream no longer
	// holds is lost, or published and not yet counted, which the next
	// owner's settling tells apart.
	inStream, serr := s.streamEvents(ctx, partition)
	if serr != nil {
		s.log.Warn("owner takes: reading the take stream before handing the partition over failed; only the losses noticed are handed over", "partition", partition, "err", serr)
	}
	now := s.cfg.Now()
	p.mu.Lock()
	held := p.takes.held
	args := []any{held}
	n := 0
	for id, a := range p.takes.acked {
		since := a.since
		switch {
		case a.doubt == lost || a.doubt == again:
		case a.doubt == appended && serr == nil && inStream[id] == "":
			since = now
		default:
			continue
		}
		args = append(args, id, strconv.FormatInt(since.UnixMilli(), 10)+" "+a.enc)
		n++
	}
	p.mu.Unlock()
	if n == 0 {
		return
	}
	err := errors.New("this owner never fenced the take stream")
	if held != 0 {
		keys := []string{s.cfg.Applier.keys.Takes(partition), s.cfg.Applier.keys.TakesHandOver(partition)}
		var got int64
		got, err = takeHandOverScript.Run(ctx, s.cfg.Takes.Redis, keys, args...).Int64()
		if err == nil && got < 0 {
			err = errors.New("a newer owner fenced the take stream")
		}
	}
	if err == nil {
		s.m.takeDoubts.WithLabelValues("handed_over").Add(float64(n))
		s.log.Warn("owner takes: take events Redis lost, not yet appended again, handed over to the partition's next owner", "partition", partition, "entries", n)
		return
	}
	s.m.takeDoubts.WithLabelValues("dropped").Add(float64(n))
	s.log.Error("owner takes: take events Redis lost were not appended again before the partition left this owner, nor handed over: history misses them, and its next owner does not count them",
		"partition", partition, "entries", n, "err", err)
}

// takeOverLost loads what the partition's last owner handed over (under
// p.mu, after the fence and the overlay's load): each event counts in the
// overlay, and is settled as a lost append of this owner's. The hash goes
// with the read: an event is handed over once.
func (s *Sink) takeOverLost(ctx context.Context, partition int, p *partState) {
	key := s.cfg.Applier.keys.TakesHandOver(partition)
	// after this owner's fence: no hand-over can land between the two
	pipe := s.cfg.Takes.Redis.Pipeline()
	get := pipe.HGetAll(ctx, key)
	pipe.Del(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		// the load goes on: what was handed over waits for the next
		s.log.Warn("owner takes: reading the take events handed over failed; they wait for the partition's next load", "partition", partition, "err", err)
		return
	}
	g := &p.takes
	sec := floorDiv(s.cfg.Now().UnixMilli(), 1000)
	n, over := 0, 0
	for id, v := range get.Val() {
		if len(g.ov.byID) >= s.cfg.Takes.MaxInflight {
			over++ // the overlay's bound holds whatever the hash holds
			continue
		}
		ms, enc, _ := strings.Cut(v, " ")
		since, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			continue
		}
		_, value, err := window.ParseQueuedEvent(enc)
		if err != nil {
			continue
		}
		ev, err := event.Decode(value)
		if err != nil || ev.ID != id {
			continue
		}
		if _, ok := g.ov.byID[id]; !ok {
			sub := window.Subject{Action: ev.Action, Kind: ev.Kind, Subject: ev.Subject}
			g.ov.add(sub, inflight{id: id, sec: min(floorDiv(ev.TS.UnixMilli(), 1000), sec), n: max(ev.N, 1)})
		}
		if g.acked == nil {
			g.acked = map[string]*ackedTake{}
		}
		a := &ackedTake{enc: enc, doubt: lost, since: time.UnixMilli(since)}
		g.acked[id] = a
		if g.doubtAt.IsZero() || a.since.Before(g.doubtAt) {
			g.doubtAt = a.since
		}
		n++
	}
	if over > 0 {
		s.m.takeDoubts.WithLabelValues("dropped").Add(float64(over))
		s.log.Error("owner takes: take events handed over past the overlay's bound were dropped: history misses them", "partition", partition, "entries", over, "bound", s.cfg.Takes.MaxInflight)
	}
	if n > 0 {
		s.m.takeDoubts.WithLabelValues("taken_over").Add(float64(n))
		s.log.Warn("owner takes: took over take events Redis lost that the partition's last owner had not appended again; they are appended again once nothing else can count them", "partition", partition, "entries", n)
	}
}
