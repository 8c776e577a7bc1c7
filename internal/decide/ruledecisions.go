package decide

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/internal/rules"
)

// Outcomes of floodgate_limiter_decisions_total: each rule's own verdict in
// a decision, counted once per decision and rule however many subjects and
// limits of the rule it read.
const (
	outcomeAllowed = iota // every limit of the rule had room
	outcomeNear           // allowed, but a limit had a tenth of it or less left (NearDivisor)
	outcomeDenied         // a limit of an enforced rule was exceeded (the request was denied)
	outcomeShadow         // a limit of a shadow rule was exceeded: recorded, never denied
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"allowed", "near", "denied", "shadow_denied"}

// NearDivisor sets the "near" threshold of floodgate_limiter_decisions_total:
// an allowed rule is near when one of its limits has at most a tenth of it
// left, rounded up (remaining ≤ ceil(limit/10)), so the last event a limit
// admits is always near, even of 5/1m. A subject answered from memory as
// under half a limit is never near.
const NearDivisor = 10

// MaxRuleSeries bounds the rules named in floodgate_limiter_decisions_total;
// rules past it in the file, and rules of a set already replaced by a
// reload that the current one lacks, count as "other".
const MaxRuleSeries = 500

// otherRule is the rule label of decisions no named series takes.
const otherRule = "other"

// ruleDecisions counts each rule's outcomes. Its series are the rules of
// the set in force, resolved once per rules reload (a reload drops the
// series of the rules it removed, so renames do not grow the metric); a
// decision finds its counters by the rule's name, with no label hashing.
type ruleDecisions struct {
	vec *prometheus.CounterVec
	mu  sync.Mutex
	cur atomic.Pointer[ruleIndex]
}

type ruleIndex struct {
	set    *rules.Set
	byName map[string]*[numOutcomes]prometheus.Counter
	other  *[numOutcomes]prometheus.Counter
}

func newRuleDecisions() *ruleDecisions {
	return &ruleDecisions{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_limiter_decisions_total",
		Help: "Each rule's verdict per decision, by rule (the rules file's names; \"other\" past 500 rules) and outcome: allowed, near (allowed with a tenth of a limit or less left, rounded up), denied, shadow_denied. Degraded answers are not counted here.",
	}, []string{"rule", "outcome"})}
}

// index returns the counters of set's rules. current is the set in force:
// a decision still holding a set a reload replaced uses the current
// index (its rules' names, or "other"), never brings the old series back.
func (rd *ruleDecisions) index(set *rules.Set, current func() *rules.Set) *ruleIndex {
	if ix := rd.cur.Load(); ix != nil && ix.set == set {
		return ix
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	ix := rd.cur.Load()
	if ix != nil && (ix.set == set || set != current()) {
		return ix
	}
	next := &ruleIndex{set: set, byName: map[string]*[numOutcomes]prometheus.Counter{}, other: rd.counters(otherRule)}
	if set != nil {
		for _, r := range set.Rules() {
			if len(next.byName) == MaxRuleSeries {
				break
			}
			if next.byName[r.Name] == nil {
				next.byName[r.Name] = rd.counters(r.Name)
			}
		}
	}
	if ix != nil {
		for name := range ix.byName {
			if next.byName[name] == nil {
				for _, o := range outcomeNames {
					rd.vec.DeleteLabelValues(name, o)
				}
			}
		}
	}
	rd.cur.Store(next)
	return next
}

func (rd *ruleDecisions) counters(rule string) *[numOutcomes]prometheus.Counter {
	var cs [numOutcomes]prometheus.Counter
	for i, o := range outcomeNames {
		cs[i] = rd.vec.WithLabelValues(rule, o)
	}
	return &cs
}

// count records each rule's verdict in d: the worst over its limits
// (denied or shadow_denied, then near, then allowed).
func (rd *ruleDecisions) count(ix *ruleIndex, d *Decision) {
	// A decision reads a few rules: a small array, no allocation.
	var seen [8]struct {
		rule    string
		outcome int
	}
	n := 0
	var extra map[string]int
	for i := range d.Limits {
		lim := &d.Limits[i]
		o := limitOutcome(lim)
		k := 0
		for k < n && seen[k].rule != lim.Rule {
			k++
		}
		switch {
		case k < n:
			seen[k].outcome = max(seen[k].outcome, o)
		case n < len(seen):
			seen[n].rule, seen[n].outcome = lim.Rule, o
			n++
		default:
			if extra == nil {
				extra = map[string]int{}
			}
			extra[lim.Rule] = max(extra[lim.Rule], o)
		}
	}
	inc := func(rule string, o int) {
		cs := ix.byName[rule]
		if cs == nil {
			cs = ix.other
		}
		cs[o].Inc()
	}
	for _, s := range seen[:n] {
		inc(s.rule, s.outcome)
	}
	for r, o := range extra {
		inc(r, o)
	}
}

func limitOutcome(l *Limit) int {
	switch {
	case l.Allowlisted:
		return outcomeAllowed
	case l.Exceeded && l.Shadow:
		return outcomeShadow
	case l.Exceeded:
		return outcomeDenied
	case !l.Estimated && l.Limit > 0 && l.Remaining <= (l.Limit+NearDivisor-1)/NearDivisor:
		return outcomeNear
	}
	return outcomeAllowed
}
