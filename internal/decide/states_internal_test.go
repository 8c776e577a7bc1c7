package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// A taker's states that do not answer every limit (a peer's short answer)
// fail the request with the reason instead of the process.
func TestShortStatesAreRefused(t *testing.T) {
	plans := []plan{{limits: []planLimit{{limit: rules.Limit{Count: 5, Window: time.Minute}}, {bucket: &rules.Bucket{}}}}}
	whole := window.EvalState{Sums: []int64{1}, Until: []time.Time{{}}, Buckets: []window.BucketEval{{}}}
	if err := checkStates(plans, []window.EvalState{whole}); err != nil {
		t.Fatalf("a whole answer refused: %v", err)
	}
	for _, c := range []struct {
		states []window.EvalState
		says   string
	}{
		{nil, "0 states answer 1 subjects"},
		{[]window.EvalState{{}}, "0 sums"},
		{[]window.EvalState{{Sums: []int64{1}, Until: []time.Time{{}}}}, "0 buckets"},
	} {
		if err := checkStates(plans, c.states); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("states %+v: %v, want an error saying %q", c.states, err, c.says)
		}
	}
}
