package live

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// BenchmarkEvalFromCopies evaluates a login subject past its 10/h limit
// (2/s, 5/m, 10/h, 100/d) from its bucket copies, as a write-back owner
// does for every batch that touches it.
func BenchmarkEvalFromCopies(b *testing.B) {
	h := NewHeadroom(10)
	sub := window.Subject{Action: "login", Kind: "ip", Subject: "10.0.0.1"}
	r := h.roomFor(sub, 4)
	const t = int64(1_900_000_000) // a second late in its minute, hour and day
	rule := &rules.Rule{Name: "login"}
	pr := &profile{maxw: 86400}
	for _, l := range []rules.Limit{{Count: 2, Window: time.Second}, {Count: 5, Window: time.Minute}, {Count: 10, Window: time.Hour}, {Count: 100, Window: 24 * time.Hour}} {
		pr.limits = append(pr.limits, profileLimit{rule: rule, limit: l})
	}
	// Every hash the windows read, with an event every few seconds.
	for _, id := range []hashID{{'s', t / 60}, {'s', t/60 - 1}, {'m', t / 3600}, {'m', t/3600 - 1}, {'h', t / 86400}, {'h', t/86400 - 1}} {
		counts := make([]int64, 60)
		for k := range counts {
			if (int64(k)+id.n)%3 == 0 {
				counts[k] = 1
			}
		}
		h.mir.store(r, id, counts)
	}
	var ev evaluation
	for range 5 { // and every other hash the windows' edges read
		ev.start(h.mir, r)
		if _, ok := ev.eval(pr, evalAll, t, t); ok {
			break
		}
		for id := range ev.missing {
			counts := make([]int64, 60)
			counts[0] = 1
			h.mir.store(r, id, counts)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		ev.start(h.mir, r)
		v, ok := ev.eval(pr, evalAll, t, t)
		if !ok || !v.blocks {
			b.Fatalf("evaluated %+v (ok %v), want a blocking verdict", v, ok)
		}
	}
}
