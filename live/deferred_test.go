package live

import (
	"strconv"
	"testing"

	"floodgate/window"
)

// Only a state that changes no decision waits, over a slot known to hold
// none that blocks, and a partition holds at most maxDeferred of them.
func TestDeferStateOnlyCountChangesAndBounded(t *testing.T) {
	hr := NewHeadroom(4 * maxDeferred)
	w := &writeBack{}
	counts := &verdict{state: `{"t":1,"l":[["r",10,60,6,0]]}`, expires: 61}
	sub := func(i int) window.Subject {
		return window.Subject{Action: "a", Kind: "k", Subject: strconv.Itoa(i)}
	}
	stated := func(i int, s byte) {
		hr.set(sub(i), []int64{5}, 1)
		hr.roomOf(sub(i)).stated = s
	}
	for i := range maxDeferred + 3 {
		stated(i, statedSome)
		if got := w.deferState(hr, sub(i), counts); got != (i < maxDeferred) {
			t.Fatalf("subject %d of a bound of %d: held back %v", i, maxDeferred, got)
		}
	}
	if !w.deferState(hr, sub(0), counts) {
		t.Fatal("a subject held back already was refused at the bound")
	}
	w.undefer(sub(0))
	if len(w.deferred) != maxDeferred-1 {
		t.Fatalf("%d held back after undefer, want %d", len(w.deferred), maxDeferred-1)
	}

	blocks := *counts
	blocks.blocks = true
	deny := *counts
	deny.best[0] = &candidate{l: 1, count: 11, untilMS: 61_000, t: 1}
	none := *counts
	none.state = ""
	for name, v := range map[string]*verdict{"a state that blocks": &blocks, "a deny": &deny, "a state cleared": &none} {
		if w.deferState(hr, sub(0), v) {
			t.Errorf("%s was held back", name)
		}
	}
	for name, s := range map[string]byte{"unknown": statedUnknown, "blocking": statedBlocks} {
		stated(1, s)
		if w.deferState(hr, sub(1), counts) {
			t.Errorf("held back over a slot whose state is %s", name)
		}
	}
	if w.deferState(hr, sub(maxDeferred*3), counts) {
		t.Error("held back a subject with no room")
	}
}
