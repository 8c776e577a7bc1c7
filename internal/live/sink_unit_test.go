package live

import (
	"slices"
	"testing"
	"time"
)

// Partitions assigned together checkpoint at phases spread over the
// interval: no two closer than half an even share, for any count.
func TestCheckpointPhasesSpread(t *testing.T) {
	const every = time.Second
	for _, n := range []int{2, 3, 6, 12, 24, 64} {
		phases := make([]time.Duration, n)
		for p := range phases {
			phases[p] = checkpointPhase(p, every)
			if phases[p] < 0 || phases[p] >= every {
				t.Fatalf("n=%d: partition %d phase %v outside [0, %v)", n, p, phases[p], every)
			}
		}
		slices.Sort(phases)
		share := every / time.Duration(n)
		for i := range phases {
			next := every + phases[0]
			if i+1 < n {
				next = phases[i+1]
			}
			if gap := next - phases[i]; gap < share/2 {
				t.Errorf("n=%d: phases %v and %v are %v apart, under half of %v", n, phases[i], next, gap, share)
			}
		}
	}
}
