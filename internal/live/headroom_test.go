package live

import (
	"math"
	"testing"

	"github.com/floodgate-dev/floodgate/internal/window"
)

// A subject near one limit and far from another evaluates only the near
// one; the far one's headroom shrinks by what each batch adds until the
// batch could reach it.
func TestHeadroomPlansPerLimit(t *testing.T) {
	h := NewHeadroom(10)
	sub := window.Subject{Action: "login", Kind: "ip", Subject: "192.0.2.1"}
	if got := h.needs(sub, 2, 1, 100, 100); got != evalAll {
		t.Fatalf("unknown subject: plan %q, want all", got)
	}
	// Evaluated: near the first limit (0 left), 5 events from the second's
	// threshold.
	h.set(sub, []int64{0, 5}, 100)
	steps := []struct {
		added int64
		want  string
	}{
		{2, "10"},    // 5 -> 3 left
		{2, "10"},    // 3 -> 1 left
		{1, evalAll}, // could reach the second
	}
	for i, s := range steps {
		if got := h.needs(sub, 2, s.added, 100, 100); got != s.want {
			t.Fatalf("step %d: plan %q, want %q", i, got, s.want)
		}
		if s.want == "10" {
			h.set(sub, []int64{0, notEvaluated}, 100)
		}
	}
	// Far from both: nothing to evaluate.
	h.set(sub, []int64{4, 4}, 101)
	if got := h.needs(sub, 2, 3, 101, 101); got != evalNone {
		t.Fatalf("far from both: plan %q, want none", got)
	}
	// An evaluation second before the remembered one evaluates all.
	if got := h.needs(sub, 2, 0, 100, 101); got != evalAll {
		t.Fatalf("earlier second: plan %q, want all", got)
	}
}

// A subject with more limits than a room has slots keeps the least
// headroom of the last ones: they are evaluated together once a batch
// could bring the nearest of them near, never later.
func TestHeadroomSharedSlot(t *testing.T) {
	h := NewHeadroom(10)
	sub := window.Subject{Action: "login", Kind: "ip", Subject: "192.0.2.1"}
	h.set(sub, []int64{0, 50, 50, 9, 7, 30}, 100)
	if got := h.needs(sub, 6, 3, 100, 100); got != "100000" {
		t.Fatalf("plan %q, want 100000", got)
	}
	// The shared slot is now 7-3 = 4: a batch of 4 evaluates all of it.
	if got := h.needs(sub, 6, 4, 100, 100); got != "100111" {
		t.Fatalf("plan %q, want 100111", got)
	}
	// Evaluated: the shared slot holds the least of the three (2), the
	// second and third their shrunk headroom (50-3-4 = 43, then 41).
	h.set(sub, []int64{0, notEvaluated, notEvaluated, 20, 2, 40}, 100)
	if got := h.needs(sub, 6, 2, 100, 100); got != "100111" {
		t.Fatalf("after set: plan %q, want 100111", got)
	}
	h.set(sub, []int64{25, notEvaluated, notEvaluated, 20, 30, 40}, 100)
	if got := h.needs(sub, 6, 19, 100, 100); got != evalNone {
		t.Fatalf("far from all: plan %q, want none", got)
	}
	// 25-19 = 6 left for the first, 41-19 = 22 for the second and third,
	// 20-19 = 1 for the shared slot.
	if got := h.needs(sub, 6, 1, 100, 100); got != "000111" {
		t.Fatalf("plan %q, want 000111", got)
	}
	// A shared slot with a limit left out and others evaluated keeps the
	// least of the left-out one's headroom (1) and the evaluated ones'.
	h.set(sub, []int64{5, 5, 5, notEvaluated, 100, 100}, 100)
	if got := h.needs(sub, 6, 1, 100, 100); got != "000111" {
		t.Fatalf("shared slot: plan %q, want 000111", got)
	}
}

// Headroom past 32 bits is kept lowered (an extra evaluation, never a
// missed one), a negative one means evaluate, and a second past 32 bits is
// never trusted.
func TestHeadroomClamps(t *testing.T) {
	h := NewHeadroom(10)
	sub := window.Subject{Action: "login", Kind: "ip", Subject: "192.0.2.1"}
	h.set(sub, []int64{1 << 40, -1 << 40}, 100)
	if got := h.needs(sub, 2, math.MaxInt32-1, 100, 100); got != "01" {
		t.Fatalf("plan %q, want 01", got)
	}
	h.set(sub, []int64{1 << 40, 10}, 100)
	if got := h.needs(sub, 2, math.MaxInt32, 100, 100); got != evalAll {
		t.Fatalf("added past the clamp: plan %q, want all", got)
	}
	late := int64(math.MaxUint32) + 10
	h.set(sub, []int64{10, 10}, late)
	if got := h.needs(sub, 2, 1, late, late); got != evalAll {
		t.Fatalf("second past 32 bits: plan %q, want all", got)
	}
	if got := h.needs(sub, 2, -1, 100, 100); got != evalAll {
		t.Fatalf("negative added: plan %q, want all", got)
	}
}

// Subjects are told apart by their whole field, a changed number of limits
// resets the room, and a batch that would take it past its bound forgets
// all first.
func TestHeadroomSubjects(t *testing.T) {
	h := NewHeadroom(2)
	a := window.Subject{Action: "login", Kind: "ip", Subject: "a"}
	b := window.Subject{Action: "login", Kind: "ip", Subject: "b"}
	c := window.Subject{Action: "login", Kind: "ip", Subject: "c"}
	h.set(a, []int64{10}, 100)
	h.set(b, []int64{0}, 100)
	if got := h.needs(a, 1, 1, 100, 100); got != evalNone {
		t.Fatalf("a: plan %q, want none", got)
	}
	if got := h.needs(b, 1, 1, 100, 100); got != evalAll {
		t.Fatalf("b: plan %q, want all", got)
	}
	if got := h.needs(a, 2, 1, 100, 100); got != evalAll {
		t.Fatalf("a with 2 limits: plan %q, want all", got)
	}
	h.use(nil, 1) // full: forgets a and b
	h.set(c, []int64{10}, 100)
	if r := h.Resident(); r.Subjects != 1 {
		t.Fatalf("resident %d, want 1", r.Subjects)
	}
	if got := h.needs(a, 1, 1, 100, 100); got != evalAll {
		t.Fatalf("a forgotten: plan %q, want all", got)
	}
	// A key that does not alias the caller's strings.
	buf := []byte("login:ip:d")
	d := window.Subject{Action: string(buf[:5]), Kind: "ip", Subject: "d"}
	h.set(d, []int64{10}, 100)
	if got := h.needs(window.Subject{Action: "login", Kind: "ip", Subject: "d"}, 1, 1, 100, 100); got != evalNone {
		t.Fatalf("d: plan %q, want none", got)
	}
}

// needs runs for every subject of every batch: it must not allocate when
// it plans nothing.
func TestHeadroomNeedsAllocs(t *testing.T) {
	h := NewHeadroom(10)
	sub := window.Subject{Action: "login", Kind: "ip", Subject: "192.0.2.1"}
	h.set(sub, []int64{1 << 30, 1 << 30}, 100)
	if n := testing.AllocsPerRun(100, func() { h.needs(sub, 2, 1, 100, 100) }); n != 0 {
		t.Fatalf("needs allocates %v times a call", n)
	}
}
