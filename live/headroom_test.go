package live

import (
	"testing"

	"floodgate/window"
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
