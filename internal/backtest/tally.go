package backtest

import (
	"time"

	"github.com/floodgate-dev/floodgate/internal/window"
)

// denyKey is what the report counts denies by: a subject under one limit
// (or bucket) of one rule.
type denyKey struct {
	Action, Kind, Subject string
	Rule, Limit           string
	Shadow                bool
}

func keyOf(d *window.DecisionMessage) denyKey {
	lim := d.Limit.String()
	if d.Bucket != nil {
		lim = "bucket " + d.Bucket.Rate.String() + " burst " + itoa(d.Bucket.Burst)
	}
	return denyKey{d.Action, d.Kind, d.Subject, d.Rule, lim, d.Shadow}
}

// tally follows one key: the deny records written for it, as intervals
// [evaluation second, until), merged, clipped to the range.
type tally struct {
	decisions   int   // new decisions in range
	first, last int64 // ms: start of the first deny in range, end of the last
	total       int64 // ms denied in range, of closed intervals
	open        bool
	s, e        int64 // the open interval
}

// ruleKey is a subject under one rule, whatever the limit.
type ruleKey struct {
	Action, Kind, Subject, Rule string
	Shadow                      bool
}

func (k denyKey) rule() ruleKey { return ruleKey{k.Action, k.Kind, k.Subject, k.Rule, k.Shadow} }

// tallies count one rules set's denies in one partition, per limit and
// per rule (the union over its limits). A subject's records come from one
// partition in time order, so intervals only grow or start after the open
// one.
type tallies struct {
	from, to int64 // ms
	keys     map[denyKey]*tally
	rules    map[ruleKey]*tally
}

func newTallies(from, to time.Time) *tallies {
	return &tallies{from: from.UnixMilli(), to: to.UnixMilli(), keys: map[denyKey]*tally{}, rules: map[ruleKey]*tally{}}
}

// record notes a deny record written at d.TS until d.Until; isNew when it
// was a new decision (not an extension of the record in force).
func (ts *tallies) record(d *window.DecisionMessage, isNew bool) {
	k := keyOf(d)
	ts.add(getTally(ts.keys, k), d, isNew)
	ts.add(getTally(ts.rules, k.rule()), d, isNew)
}

func getTally[K comparable](m map[K]*tally, k K) *tally {
	t := m[k]
	if t == nil {
		t = &tally{}
		m[k] = t
	}
	return t
}

func (ts *tallies) add(t *tally, d *window.DecisionMessage, isNew bool) {
	s, e := d.TS.UnixMilli(), d.Until.UnixMilli()
	if isNew && s >= ts.from && s < ts.to {
		t.decisions++
	}
	switch {
	case !t.open:
		t.open, t.s, t.e = true, s, e
	case s <= t.e:
		t.s, t.e = min(t.s, s), max(t.e, e)
	default:
		ts.close(t)
		t.open, t.s, t.e = true, s, e
	}
}

// close adds the open interval's part in range.
func (ts *tallies) close(t *tally) {
	if !t.open {
		return
	}
	t.open = false
	s, e := max(t.s, ts.from), min(t.e, ts.to)
	if s >= e {
		return
	}
	if t.total == 0 || s < t.first {
		t.first = s
	}
	t.last = max(t.last, t.e)
	t.total += e - s
}

// finish closes every interval and drops the keys with nothing in range
// (denies of the warm-up that ended before it).
func (ts *tallies) finish() {
	finish(ts, ts.keys)
	finish(ts, ts.rules)
}

func finish[K comparable](ts *tallies, m map[K]*tally) {
	for k, t := range m {
		ts.close(t)
		if t.total == 0 && t.decisions == 0 {
			delete(m, k)
		}
	}
}

// merge adds o's keys (of another partition: only a subject produced to
// several partitions is in both, and then its deny times add up).
func (ts *tallies) merge(o *tallies) {
	merge(ts.keys, o.keys)
	merge(ts.rules, o.rules)
}

func merge[K comparable](into, from map[K]*tally) {
	for k, t := range from {
		m := into[k]
		if m == nil {
			into[k] = t
			continue
		}
		m.decisions += t.decisions
		if t.total > 0 && (m.total == 0 || t.first < m.first) {
			m.first = t.first
		}
		m.last = max(m.last, t.last)
		m.total += t.total
	}
}
