package live

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/internal/window/windowtest"
)

// testOwner is a sink answering owner takes of partition 0 of st, from
// the slot's Redis (through a client of its own), its ticks run by the
// test. Its takes are of one subject, against a limit of limit an hour.
type testOwner struct {
	t     *testing.T
	s     *Sink
	rdb   *redis.Client
	st    *window.Store
	key   string
	limit int64
	took  []string // the events of the takes it admitted
	n     int      // takes tried
}

func newLossOwner(t *testing.T) *testOwner {
	return newLossOwnerWith(t, nil)
}

// newLossOwnerWith is a testOwner of 100 an hour on a store of its own,
// whose takes' Redis client runs hook.
func newLossOwnerWith(t *testing.T, hook redis.Hook) *testOwner {
	rdb := stacktest.Redis(t)
	return newTestOwner(t, rdb, windowtest.NewStore(t, rdb), 100, hook)
}

func newTestOwner(t *testing.T, rdb *redis.Client, st *window.Store, limit int64, hook redis.Hook) *testOwner {
	t.Helper()
	// never run (no RunPartition): its produce timeout is the wait for
	// requests sent before a doubt
	relay, err := NewTakeRelay(TakeRelayConfig{Store: st, Redis: rdb, Kafka: &kafka.Client{}, ProduceTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return newTestOwnerRelay(t, rdb, st, limit, hook, relay, func(context.Context, string, int) (int64, int64, error) {
		return 0, 0, nil // nothing in the log: a resumed owner answers at once
	})
}

// newTestOwnerRelay is newTestOwner whose sink waits out relay's requests
// and reads the partition's bounds from bounds.
func newTestOwnerRelay(t *testing.T, rdb *redis.Client, st *window.Store, limit int64, hook redis.Hook, relay *TakeRelay, bounds func(context.Context, string, int) (int64, int64, error)) *testOwner {
	t.Helper()
	takes := redis.NewClient(rdb.Options())
	t.Cleanup(func() { _ = takes.Close() })
	if hook != nil {
		takes.AddHook(hook)
	}
	set := windowtest.MustRules(t, fmt.Sprintf(`
rules:
  - name: r
    action: reset
    kinds: [email]
    limits: [%d/h]
    strict: true
`, limit))
	ap, err := NewApplier(st, ApplierConfig{WriteBack: true, OwnerTakes: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSink(SinkConfig{Applier: ap, Group: "g", Rules: func() *rules.Set { return set }, CheckpointEvery: time.Hour, TakeRelay: relay,
		Takes: &TakesConfig{Redis: takes, Bounds: bounds}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.RunTakes(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if _, _, err := s.Resume(context.Background(), "lt", 0); err != nil {
		t.Fatal(err)
	}
	return &testOwner{t: t, s: s, rdb: rdb, st: st, key: st.Keys().Takes(0), limit: limit}
}

// take takes one, telling whether it was admitted.
func (o *testOwner) take() bool {
	ok, err := o.takeErr()
	return ok && err == nil
}

func (o *testOwner) takeErr() (bool, error) {
	o.t.Helper()
	now := time.Now()
	o.n++
	e := event.Event{ID: "e" + strconv.Itoa(o.n) + "-" + strconv.FormatInt(now.UnixNano(), 36), Action: "reset", Kind: "email", Subject: "l@example.com", N: 1, TS: now}
	v, err := event.Encode(e)
	if err != nil {
		o.t.Fatal(err)
	}
	q := window.EvalQuery{Subject: window.Subject{Action: "reset", Kind: "email", Subject: e.Subject}, MaxWindow: time.Hour, Count: true,
		Limits: []window.EvalLimit{{Limit: rules.Limit{Count: o.limit, Window: time.Hour}, Block: true}}}
	taken, _, _, err := o.s.TakeQueued(context.Background(), now, []window.EvalQuery{q}, 1, []window.QueuedEvent{{Key: []byte(e.Key()), Value: v, ID: e.ID}})
	if taken && err == nil {
		o.took = append(o.took, e.ID)
	}
	return taken, err
}

// lose makes the stream what a replica that lacks its last entry holds:
// the entries before it, its last id the one before.
func (o *testOwner) lose() {
	o.t.Helper()
	ctx := context.Background()
	msgs, err := o.rdb.XRange(ctx, o.key, "-", "+").Result()
	if err != nil || len(msgs) == 0 {
		o.t.Fatalf("take stream: %d entries, %v", len(msgs), err)
	}
	pipe := o.rdb.TxPipeline()
	pipe.Del(ctx, o.key)
	for _, m := range msgs[:len(msgs)-1] {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: o.key, ID: m.ID, Values: m.Values})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		o.t.Fatal(err)
	}
}

// lossNoticed waits until the owner has noticed its stream went back.
func (o *testOwner) lossNoticed() {
	o.t.Helper()
	stacktest.WaitFor(o.t, "the loss noticed", 10*time.Second, func() bool {
		p := o.s.part(0)
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.takes.doubtAt.IsZero()
	})
}

// streamEvents are the ids of the events the take stream holds.
func (o *testOwner) streamEvents() map[string]int {
	o.t.Helper()
	msgs, err := o.rdb.XRange(context.Background(), o.key, "-", "+").Result()
	if err != nil {
		o.t.Fatal(err)
	}
	ids := map[string]int{}
	for _, m := range msgs {
		for _, v := range m.Values {
			_, value, err := window.ParseQueuedEvent(v.(string))
			if err != nil {
				o.t.Fatal(err)
			}
			e, err := event.Decode(value)
			if err != nil {
				o.t.Fatal(err)
			}
			ids[e.ID]++
		}
	}
	return ids
}

// settled runs the partition's ticks until no append is in doubt.
func (o *testOwner) settled() {
	o.t.Helper()
	p := o.s.part(0)
	stacktest.WaitFor(o.t, "the appends in doubt settled", 10*time.Second, func() bool {
		o.s.reopenTakes(context.Background(), "lt", 0, p)
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, a := range p.takes.acked {
			if a.doubt != appended {
				return false
			}
		}
		return p.takes.doubtAt.IsZero()
	})
}

// doubtsSettled waits until the owner's settled doubts by outcome
// (floodgate_live_owner_take_doubts_total) are want: an append made again
// is counted as its round returns, a moment after settled saw its entry
// appended.
func (o *testOwner) doubtsSettled(want map[string]float64) {
	o.t.Helper()
	got := map[string]float64{}
	o.t.Cleanup(func() {
		if !maps.Equal(got, want) {
			o.t.Logf("settled doubts %v, want %v", got, want)
		}
	})
	stacktest.WaitFor(o.t, fmt.Sprintf("settled doubts %v", want), 10*time.Second, func() bool {
		for outcome := range want {
			got[outcome] = testutil.ToFloat64(o.s.m.takeDoubts.WithLabelValues(outcome))
		}
		return maps.Equal(got, want)
	})
}

// inOverlay tells whether the owner's overlay counts the event id.
func (o *testOwner) inOverlay(id string) bool {
	p := o.s.part(0)
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.takes.ov.byID[id]
	return ok
}

// A Redis failover to a replica that lacks the owner's last appends loses
// take entries it acknowledged: the owner notices (on its stream check, or
// on an append whose id is not past the last), gives the stream a new
// epoch on its next tick (ids could come again below the relay's cursor),
// and once nothing else can count them appends the lost entries again; its
// takes go on meanwhile (the overlay counts the lost ones), and every take
// it admitted ends in the stream exactly once.
func TestOwnerTakesAppendLostEntriesAgain(t *testing.T) {
	o := newLossOwner(t)
	for range 2 {
		if !o.take() {
			t.Fatal("a take failed")
		}
	}
	// found by the stream check: nothing is appended meanwhile
	o.lose()
	o.lossNoticed()
	if o.take() {
		t.Fatal("a take was answered before the stream that went back had a new epoch")
	}
	o.s.reopenTakes(context.Background(), "lt", 0, o.s.part(0)) // the new epoch
	if !o.take() {
		t.Fatal("a take failed while a lost entry waits to be appended again")
	}
	o.settled()
	// found by the next append: its id is not past the last acknowledged
	o.lose()
	if !o.take() {
		t.Fatal("the take that finds the loss failed; want it appended")
	}
	o.settled()
	got := o.streamEvents()
	for _, id := range o.took {
		if got[id] != 1 {
			t.Errorf("event %s is in the take stream %d times, want once", id, got[id])
		}
	}
	if len(got) != len(o.took) {
		t.Errorf("the stream holds %d events, the takes admitted %d", len(got), len(o.took))
	}
	// the append that found the second loss landed at the lost entry's
	// id, which a relay may have passed: taken back, and appended again
	// with the lost one
	o.doubtsSettled(map[string]float64{"appended_again": 3, "taken_back": 1})
}

// An owner that leaves a partition (its revoke) before appending again
// the take events Redis lost hands them over to the partition's next
// owner, whose overlay counts them and who appends them again once nothing
// else can count them: every take admitted ends in the stream once. A
// former owner's hand-over after a newer owner fenced the stream is
// refused, loudly (dropped): the newer owner's load has been.
func TestOwnerTakesHandLostEntriesOver(t *testing.T) {
	o := newLossOwner(t)
	for range 2 {
		if !o.take() {
			t.Fatal("a take failed")
		}
	}
	o.lose()
	o.lossNoticed()
	o.s.handOverLost(context.Background(), 0, o.s.part(0)) // the revoke
	if n := testutil.ToFloat64(o.s.m.takeDoubts.WithLabelValues("handed_over")); n != 1 {
		t.Fatalf("entries handed over: %v, want 1", n)
	}
	next := newTestOwner(t, o.rdb, o.st, 100, nil)
	lostID := o.took[1]
	if !next.inOverlay(lostID) {
		t.Fatal("the next owner's overlay misses the take handed over")
	}
	next.settled()
	got := next.streamEvents()
	for _, id := range o.took {
		if got[id] != 1 {
			t.Errorf("event %s is in the take stream %d times, want once", id, got[id])
		}
	}
	next.doubtsSettled(map[string]float64{"taken_over": 1, "appended_again": 1})
	o.s.handOverLost(context.Background(), 0, o.s.part(0)) // a zombie's, after the fence
	if n := testutil.ToFloat64(o.s.m.takeDoubts.WithLabelValues("dropped")); n != 1 {
		t.Errorf("a hand-over after a newer owner's fence: dropped %v, want 1", n)
	}
	if n, err := o.rdb.Exists(context.Background(), o.st.Keys().TakesHandOver(0)).Result(); err != nil || n != 0 {
		t.Errorf("the hand-over hash exists (%d, %v) after the refused hand-over", n, err)
	}
}

// cutReply fails the next pipeline that appends to a take stream with a
// connection's error, before sending it or after its replies came.
type cutReply struct {
	mu    sync.Mutex
	mode  string // "before", "after", "" (none)
	fired int
}

func (h *cutReply) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *cutReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *cutReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		mode := h.mode
		if mode != "" && slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "xadd" }) {
			h.mode = ""
			h.fired++
		} else {
			mode = ""
		}
		h.mu.Unlock()
		cut := errors.New("read tcp: connection reset by peer")
		switch mode {
		case "before":
			for _, c := range cmds {
				c.SetErr(cut)
			}
			return cut
		case "after":
			_ = next(ctx, cmds)
			for _, c := range cmds {
				c.SetErr(cut)
			}
			return cut
		}
		return next(ctx, cmds)
	}
}

// An append that got no answer leaves its take failed and in the overlay
// (counted, in case it landed) until it is settled: one the take stream
// still holds uncounted, a relay may have passed, so it is taken back and
// appended again (the relay publishes it, the apply counts it); one that
// never landed leaves the overlay, so the window does not count a take
// that was never admitted.
func TestOwnerTakesSettleAppendsWithoutAnswer(t *testing.T) {
	h := &cutReply{}
	o := newLossOwnerWith(t, h)
	if !o.take() {
		t.Fatal("a take failed")
	}
	h.mu.Lock()
	h.mode = "before"
	h.mu.Unlock()
	if o.take() {
		t.Fatal("a take whose append got no answer was admitted")
	}
	never := "e2"
	h.mu.Lock()
	h.mode = "after"
	h.mu.Unlock()
	if o.take() {
		t.Fatal("a take whose append got no answer was admitted")
	}
	if h.fired != 2 {
		t.Fatalf("the cut fired %d times, want 2", h.fired)
	}
	var neverID, landedID string
	p := o.s.part(0)
	p.mu.Lock()
	for id := range p.takes.acked {
		switch {
		case strings.HasPrefix(id, never+"-"):
			neverID = id
		case strings.HasPrefix(id, "e3-"):
			landedID = id
		}
	}
	p.mu.Unlock()
	if neverID == "" || landedID == "" || !o.inOverlay(neverID) || !o.inOverlay(landedID) {
		t.Fatalf("the two takes without an answer: %q and %q; want both in doubt and counted", neverID, landedID)
	}
	o.settled()
	if o.inOverlay(neverID) {
		t.Error("the take whose append never landed is still counted")
	}
	if !o.inOverlay(landedID) {
		t.Error("the take whose append landed is no longer counted before its event is")
	}
	got := o.streamEvents()
	if got[neverID] != 0 || got[landedID] != 1 || got[o.took[0]] != 1 {
		t.Errorf("the stream holds %v; want the first take's and the landed one's events once each", got)
	}
	o.doubtsSettled(map[string]float64{"not_appended": 1, "taken_back": 1, "appended_again": 1})
}

// A member cut off from the group but not from Redis still believes it
// owns its partitions: a take it admits from its memory must not be
// answered once a new owner has loaded the take stream, or the two would
// admit the same room twice. The new owner's load fences the stream; the
// zombie's append fails, so does its take, and it answers no more.
func TestOwnerTakesZombieIsFenced(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := windowtest.NewStore(t, rdb)
	zombie := newTestOwner(t, rdb, st, 3, nil)
	if ok, err := zombie.takeErr(); !ok || err != nil {
		t.Fatalf("the first owner's take: taken %v, %v", ok, err)
	}
	next := newTestOwner(t, rdb, st, 3, nil)
	for i := range 2 {
		if ok, err := next.takeErr(); !ok || err != nil {
			t.Fatalf("the new owner's take %d: taken %v, %v", i+1, ok, err)
		}
	}
	if ok, err := next.takeErr(); ok || err != nil {
		t.Fatalf("the new owner's fourth take: taken %v, %v; want refused (its predecessor's take counts)", ok, err)
	}
	// the zombie's memory holds 1 of 3
	for range 2 {
		if ok, err := zombie.takeErr(); ok || !errors.Is(err, ErrNotOwner) {
			t.Fatalf("the zombie's take: taken %v, %v; want failed, not the owner", ok, err)
		}
	}
	if n, err := rdb.XLen(context.Background(), st.Keys().Takes(0)).Result(); err != nil || n != 3 {
		t.Errorf("the take stream holds %d entries (%v), want the 3 admitted", n, err)
	}
}
