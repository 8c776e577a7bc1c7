package jitter

import (
	"testing"
	"time"
)

func TestBackoffWaitsAreBoundedAndGrow(t *testing.T) {
	for _, c := range []struct{ first, longest time.Duration }{
		{200 * time.Millisecond, 5 * time.Second}, // aggregator
		{100 * time.Millisecond, 5 * time.Second}, // feed
		{10 * time.Millisecond, 5 * time.Second},  // tests' relays
		{2 * time.Second, 3 * time.Second},        // setup
		{time.Second, time.Second},                // no room: flat
		{5 * time.Second, time.Second},            // longest below first
	} {
		b := New(c.first, c.longest)
		longest := max(c.longest, c.first)
		prev := time.Duration(0)
		for i := range 40 {
			d := b.Next()
			if d < c.first || d > longest {
				t.Fatalf("New(%v, %v): wait %d is %v, outside [%v, %v]", c.first, c.longest, i, d, c.first, longest)
			}
			// The intervals double, so until the ceiling a wait is never
			// below the last; at the ceiling the draws are within
			// [longest/2, longest].
			if d < prev/2 {
				t.Fatalf("New(%v, %v): wait %d is %v after %v", c.first, c.longest, i, d, prev)
			}
			prev = d
		}
	}
}

func TestBackoffFirstWaitAndReset(t *testing.T) {
	b := New(200*time.Millisecond, 5*time.Second)
	for range 10 {
		b.Next()
	}
	if d := b.Next(); d < 2400*time.Millisecond {
		t.Fatalf("after 10 failures the wait is %v, want about 2.5s at least (half the ceiling)", d)
	}
	b.Reset()
	if d := b.Next(); d < 200*time.Millisecond || d > 400*time.Millisecond {
		t.Fatalf("first wait after Reset is %v, want within [200ms, 400ms]", d)
	}
}

func TestBackoffWaitsAreJittered(t *testing.T) {
	// Followers failing together must not wait alike: the n-th waits of
	// many loops spread over their range instead of being one value.
	for step := range 8 {
		seen := map[time.Duration]bool{}
		lo, hi := time.Duration(1<<62), time.Duration(0)
		for range 100 {
			b := New(200*time.Millisecond, 5*time.Second)
			var d time.Duration
			for range step + 1 {
				d = b.Next()
			}
			seen[d] = true
			lo, hi = min(lo, d), max(hi, d)
		}
		if len(seen) < 50 {
			t.Fatalf("step %d: 100 loops drew only %d distinct waits", step, len(seen))
		}
		// The spread is ±1/3 of the interval: the draws cover a good
		// part of it (a third of the interval between the extremes).
		if hi-lo < (hi+lo)/2/3 {
			t.Fatalf("step %d: waits within [%v, %v] only", step, lo, hi)
		}
	}
	if b := New(time.Second, time.Second); b.Next() != time.Second {
		t.Fatalf("a flat backoff waits other than 1s")
	}
}
