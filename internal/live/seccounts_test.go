package live

import "testing"

// secCounts counts per second alike before and after it moves to a map.
func TestSecCountsMatchAMap(t *testing.T) {
	var c secCounts
	want := map[int64]int64{}
	for i := range 200 {
		sec := int64(i*7%(3*maxFewSeconds)) - 5 // repeats, out of order, negative
		c.add(sec, int64(i%3+1))
		want[sec] += int64(i%3 + 1)
		got := map[int64]int64{}
		c.each(func(s, n int64) { got[s] += n })
		if len(got) != len(want) {
			t.Fatalf("after %d adds: %d seconds, want %d", i+1, len(got), len(want))
		}
		for s, n := range want {
			if got[s] != n {
				t.Fatalf("after %d adds: second %d has %d, want %d", i+1, s, got[s], n)
			}
		}
	}
	if c.many == nil {
		t.Fatalf("%d distinct seconds still in the list", len(want))
	}
}
