package decide

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-dev/floodgate/internal/rules"
)

func ruleSet(t *testing.T, n int, prefix string) *rules.Set {
	t.Helper()
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: %s%d\n    action: a\n    kinds: [ip]\n    limits: [10/1m]\n", prefix, i)
	}
	set, err := rules.Parse([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// The series are bounded by the rules in force: past MaxRuleSeries rules
// count as other; a decision on a set a reload replaced neither rebuilds
// the old series nor adds any.
func TestRuleDecisionsBounded(t *testing.T) {
	rd := newRuleDecisions()
	big := ruleSet(t, MaxRuleSeries+20, "r")
	current := big
	cur := func() *rules.Set { return current }
	ix := rd.index(big, cur)
	if n := testutil.CollectAndCount(rd.vec); n != (MaxRuleSeries+1)*numOutcomes {
		t.Fatalf("%d series for %d rules, want %d", n, MaxRuleSeries+20, (MaxRuleSeries+1)*numOutcomes)
	}
	last := fmt.Sprintf("r%d", MaxRuleSeries+5)
	rd.count(ix, &Decision{Limits: []Limit{{Rule: last, Limit: 10, Remaining: 1}, {Rule: "r0", Limit: 10, Remaining: 9}, {Rule: "r0", Limit: 10, Exceeded: true}}})
	if v := testutil.ToFloat64(rd.vec.WithLabelValues("other", "near")); v != 1 {
		t.Errorf("a rule past the bound: other/near = %v, want 1", v)
	}
	if v := testutil.ToFloat64(rd.vec.WithLabelValues("r0", "denied")); v != 1 {
		t.Errorf("r0/denied = %v, want 1 (once, its worst limit)", v)
	}
	if v := testutil.ToFloat64(rd.vec.WithLabelValues("r0", "allowed")); v != 0 {
		t.Errorf("r0/allowed = %v, want 0", v)
	}

	small := ruleSet(t, 2, "s")
	current = small
	ix = rd.index(small, cur)
	if n := testutil.CollectAndCount(rd.vec); n != 3*numOutcomes {
		t.Fatalf("%d series after a reload to 2 rules, want %d", n, 3*numOutcomes)
	}
	// A decision still holding the old set: the current index, nothing
	// rebuilt; its rules are unknown now, so other.
	if got := rd.index(big, cur); got != ix {
		t.Fatal("a replaced set rebuilt the index")
	}
	rd.count(ix, &Decision{Limits: []Limit{{Rule: "r1", Limit: 10, Remaining: 10}}})
	if n := testutil.CollectAndCount(rd.vec); n != 3*numOutcomes {
		t.Fatalf("%d series after a decision on the old set, want %d", n, 3*numOutcomes)
	}
	if v := testutil.ToFloat64(rd.vec.WithLabelValues("other", "allowed")); v != 1 {
		t.Errorf("other/allowed = %v, want 1", v)
	}
}

// Counting a decision allocates nothing: it sits on the hot path.
func TestRuleDecisionsCountAllocs(t *testing.T) {
	rd := newRuleDecisions()
	set := ruleSet(t, 3, "r")
	ix := rd.index(set, func() *rules.Set { return set })
	d := &Decision{Limits: []Limit{{Rule: "r0", Limit: 10, Remaining: 5}, {Rule: "r1", Limit: 10, Remaining: 1}, {Rule: "r2", Limit: 10, Exceeded: true}}}
	if n := testing.AllocsPerRun(100, func() { rd.index(set, func() *rules.Set { return set }); rd.count(ix, d) }); n != 0 {
		t.Errorf("%v allocations per decision, want 0", n)
	}
}
