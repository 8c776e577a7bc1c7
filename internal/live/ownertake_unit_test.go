package live

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// The overlay holds each in-flight take once, drops it by its event id when
// the apply counts it, and expires what no window reaches.
func TestOverlayAddDropExpire(t *testing.T) {
	a := window.Subject{Action: "reset", Kind: "email", Subject: "a@example.com"}
	b := window.Subject{Action: "reset", Kind: "email", Subject: "b@example.com"}
	o := newOverlay()
	o.add(a, inflight{id: "1", sec: 100, n: 1})
	o.add(a, inflight{id: "1", sec: 100, n: 1}) // a repeat: once
	o.add(a, inflight{id: "2", sec: 150, n: 2})
	o.add(b, inflight{id: "3", sec: 90, n: 1})
	if len(o.byID) != 3 || len(o.bySub[a]) != 2 {
		t.Fatalf("after adds: %d ids, %d takes of a", len(o.byID), len(o.bySub[a]))
	}
	if !o.drop("1") || o.drop("1") || o.drop("unknown") {
		t.Errorf("drop: an id goes once, an unknown one not at all")
	}
	if got := o.expire(a, 151); len(got) != 0 || o.bySub[a] != nil || len(o.byID) != 1 {
		t.Errorf("expire before 151: left %v, ids %v", got, o.byID)
	}
	o.sweep(91)
	if len(o.byID) != 0 || len(o.bySub) != 0 {
		t.Errorf("sweep: left %v %v", o.byID, o.bySub)
	}
}

// A retry time the overlay decides comes from its takes in time order: the
// window must drop the ones that make the excess.
func TestOverlayUntil(t *testing.T) {
	ov := []inflight{{id: "c", sec: 105, n: 1}, {id: "a", sec: 101, n: 2}, {id: "old", sec: 40, n: 5}}
	for _, c := range []struct{ need, want int64 }{{1, 161}, {2, 161}, {3, 165}, {4, -1}} {
		if got := overlayUntil(ov, 110, 60, c.need, -1); got != c.want {
			t.Errorf("need %d: got %d, want %d", c.need, got, c.want)
		}
	}
}

// Each counted query gets its own event, by the subject's Kafka key, with
// the id the limiter gave or, without it, the one the event holds; a
// counted query without one fails, and an event of no counted query is not
// queued (the limiter publishes it).
func TestMatchEvents(t *testing.T) {
	q := func(subject string, count bool) window.EvalQuery {
		return window.EvalQuery{Subject: window.Subject{Action: "reset", Kind: "email", Subject: subject}, Count: count}
	}
	enc := func(id, subject string, withID bool) window.QueuedEvent {
		e := event.Event{ID: id, Action: "reset", Kind: "email", Subject: subject, N: 1, TS: time.Unix(1795771658, 0)}
		v, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		qe := window.QueuedEvent{Key: []byte(e.Key()), Value: v}
		if withID {
			qe.ID = id
		}
		return qe
	}
	qs := []window.EvalQuery{q("a@example.com", true), q("b@example.com", false), q("c@example.com", true)}
	evs := []window.QueuedEvent{enc("ec", "c@example.com", false), enc("ea", "a@example.com", true), enc("eb", "b@example.com", true)}
	by, queued, err := matchEvents(qs, evs)
	if err != nil {
		t.Fatal(err)
	}
	if by[0].id != "ea" || by[1] != nil || by[2].id != "ec" || !strings.HasPrefix(by[0].enc, "19:email:a@example.com{") {
		t.Errorf("matched %+v %+v %+v", by[0], by[1], by[2])
	}
	if !queued[0] || !queued[1] || queued[2] {
		t.Errorf("queued %v: the events of counted queries only", queued)
	}
	if _, _, err := matchEvents(qs, evs[1:]); err == nil || !strings.Contains(err.Error(), "no event for reset:email:c@example.com") {
		t.Errorf("a counted query without its event: %v", err)
	}
}

// An owner take's n is the event contract's, 1..event.MaxN, whoever calls:
// an n near 2^63 overflowed the window's sum past any limit.
func TestOwnerTakeBoundsN(t *testing.T) {
	s := &Sink{cfg: SinkConfig{Takes: &TakesConfig{}}}
	qs := []window.EvalQuery{{Subject: window.Subject{Action: "reset", Kind: "email", Subject: "a@example.com"}, Count: true}}
	for _, n := range []int64{0, -1, event.MaxN + 1, math.MaxInt64} {
		if _, _, _, err := s.takeQueued(context.Background(), time.Now(), qs, n, nil); err == nil || !strings.Contains(err.Error(), "want 1..1000000") {
			t.Errorf("take of n=%d: %v", n, err)
		}
		if _, _, _, err := s.Reserve(context.Background(), time.Now(), qs, n, nil); err == nil || !strings.Contains(err.Error(), "want 1..1000000") {
			t.Errorf("reservation of n=%d: %v", n, err)
		}
	}
}
