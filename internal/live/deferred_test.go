package live

import (
	"strconv"
	"testing"

	"github.com/floodgate-dev/floodgate/internal/window"
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
		if got := w.deferState(hr, sub(i), counts, nil, holdAt{}); got != (i < maxDeferred) {
			t.Fatalf("subject %d of a bound of %d: held back %v", i, maxDeferred, got)
		}
	}
	if !w.deferState(hr, sub(0), counts, nil, holdAt{}) {
		t.Fatal("a subject held back already was refused at the bound")
	}
	w.undefer(hr, sub(0))
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
		if w.deferState(hr, sub(0), v, nil, holdAt{}) {
			t.Errorf("%s was held back", name)
		}
	}
	for name, s := range map[string]byte{"unknown": statedUnknown, "blocking": statedBlocks} {
		stated(1, s)
		if w.deferState(hr, sub(1), counts, nil, holdAt{}) {
			t.Errorf("held back over a slot whose state is %s", name)
		}
	}
	if w.deferState(hr, sub(maxDeferred*3), counts, nil, holdAt{}) {
		t.Error("held back a subject with no room")
	}
}

// An owner remembers the decisions it wrote only for subjects whose state
// blocks, at most maxWritten of them, a record it did not write as unknown,
// and forgets them once they have all ended.
func TestWrittenDecisionsBoundedAndForgotten(t *testing.T) {
	w := &writeBack{}
	blocking := []nearLimit{{l: 1, until: 100}}
	deny := [2]candidate{{l: 1, untilMS: 100_000}}
	for i := range maxWritten + 5 {
		w.wrote(strconv.Itoa(i), blocking, deny, [2]bool{true, false}, 0, "")
	}
	if len(w.written) != maxWritten {
		t.Fatalf("%d subjects remembered, want the bound %d", len(w.written), maxWritten)
	}
	if got := w.written["0"].records; got != [2]writtenRecord{{1, 100_000}, {}} {
		t.Fatalf("records remembered %+v", got)
	}
	w.wrote("0", blocking, [2]candidate{{l: 1, untilMS: 90_000}}, [2]bool{}, 0, "")
	if got := w.written["0"].records[0]; got != (writtenRecord{}) {
		t.Fatalf("a candidate the script did not write left %+v remembered, want none known", got)
	}
	w.wrote("1", nil, [2]candidate{}, [2]bool{}, 0, "")
	if _, ok := w.written["1"]; ok {
		t.Fatal("a subject whose state no longer blocks is still remembered")
	}
	// At second 100 the states have ended; the records, at 100s, end
	// within it: only "0", whose record is unknown, has ended whole.
	w.pruneWritten(100)
	if _, ok := w.written["0"]; ok || len(w.written) != maxWritten-2 {
		t.Fatalf("%d remembered after pruning at second 100, want %d, not \"0\"", len(w.written), maxWritten-2)
	}
	w.pruneWritten(101)
	if len(w.written) != 0 {
		t.Fatalf("%d remembered once all ended", len(w.written))
	}
}
