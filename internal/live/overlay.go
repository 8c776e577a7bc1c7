package live

import (
	"slices"

	"github.com/floodgate-dev/floodgate/internal/window"
)

// overlay is a partition's takes answered whose events the owner has not
// counted yet.
type overlay struct {
	bySub map[window.Subject][]inflight
	byID  map[string]window.Subject
}

type inflight struct {
	id     string // the event's
	sec, n int64
}

func newOverlay() *overlay {
	return &overlay{bySub: map[window.Subject][]inflight{}, byID: map[string]window.Subject{}}
}

func (o *overlay) add(sub window.Subject, t inflight) {
	if _, ok := o.byID[t.id]; ok {
		return
	}
	o.byID[t.id] = sub
	o.bySub[sub] = append(o.bySub[sub], t)
}

// drop removes the take whose event has id, reporting whether it was there.
func (o *overlay) drop(id string) bool {
	sub, ok := o.byID[id]
	if !ok {
		return false
	}
	delete(o.byID, id)
	ts := slices.DeleteFunc(o.bySub[sub], func(t inflight) bool { return t.id == id })
	if len(ts) == 0 {
		delete(o.bySub, sub)
	} else {
		o.bySub[sub] = ts
	}
	return true
}

// expire drops sub's takes of seconds before from: no window reaches them.
func (o *overlay) expire(sub window.Subject, from int64) []inflight {
	ts := o.bySub[sub]
	k := 0
	for _, t := range ts {
		if t.sec >= from {
			ts[k] = t
			k++
			continue
		}
		delete(o.byID, t.id)
	}
	if k == 0 {
		delete(o.bySub, sub)
		return nil
	}
	o.bySub[sub] = ts[:k]
	return ts[:k]
}

// sweep drops every take of seconds before from.
func (o *overlay) sweep(from int64) {
	for sub := range o.bySub {
		o.expire(sub, from)
	}
}
