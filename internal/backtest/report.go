package backtest

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is what a backtest found.
type Report struct {
	// Source is "kafka" (the events topic, exact) or "history" (minute
	// buckets, Precision says how exact).
	Source    string `json:"source"`
	Topic     string `json:"topic"`
	Precision string `json:"precision"`
	// Dropped lists what a backtest from history could not evaluate.
	Dropped []string `json:"dropped,omitempty"`
	// Retention is why the topic could not answer, when Source is history.
	Retention string `json:"retention,omitempty"`
	// From and To are the range reported; ReadFrom is where the replay
	// started (From less the rules' longest window: the warm-up, whose
	// decisions are not reported).
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	ReadFrom time.Time `json:"read_from"`
	Clock    Clock     `json:"clock"`
	// Partitions replayed; Messages read (Kafka messages, or history's
	// minute rows); Events replayed (messages the aggregator would count,
	// or minute rows); Rejected by reason (as the aggregator's dead
	// letters).
	Partitions int              `json:"partitions"`
	Messages   int64            `json:"messages"`
	Events     int64            `json:"events"`
	Rejected   map[string]int64 `json:"rejected,omitempty"`
	// Seconds is the replay's wall time, EventsPerSecond its speed.
	Seconds         float64 `json:"seconds"`
	EventsPerSecond float64 `json:"events_per_second"`
	// RedisPeakBytes is the private Redis server's peak memory (0 on a
	// scratch Redis).
	RedisPeakBytes int64 `json:"redis_peak_bytes"`

	Candidate *Outcome `json:"candidate"`
	Baseline  *Outcome `json:"baseline,omitempty"`
	// Changes, with a baseline: per subject and rule, what the candidate
	// denies that the baseline did not (new), what it no longer denies
	// (gone), and what it denies differently (changed).
	Changes []Change `json:"changes,omitempty"`
	// Unchanged counts the subjects and rules denied alike by both.
	Unchanged int `json:"unchanged"`
}

// Outcome is what one rules set denied in the range.
type Outcome struct {
	Rules  string         `json:"rules"`
	Limits []LimitSummary `json:"limits"`
	Denies []Deny         `json:"denies"`
}

// LimitSummary is one limit (or bucket) of one rule over every subject.
type LimitSummary struct {
	Rule        string    `json:"rule"`
	Limit       string    `json:"limit"`
	Shadow      bool      `json:"shadow"`
	Subjects    int       `json:"subjects"`
	Decisions   int       `json:"decisions"`
	First       time.Time `json:"first"`
	Last        time.Time `json:"last"`
	DenySeconds float64   `json:"deny_seconds"`

	ms int64
}

// Deny is one subject denied (or, for a shadow rule, that would have been)
// under one limit of one rule in the range. A subject's deny record names
// the limit that keeps it denied longest, as live.
type Deny struct {
	Action  string `json:"action"`
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Rule    string `json:"rule"`
	Limit   string `json:"limit"`
	Shadow  bool   `json:"shadow"`
	// Decisions are the new decisions in the range (the live path would
	// have published them on floodgate.decisions); a deny record extended
	// while in force is no new decision.
	Decisions int `json:"decisions"`
	// First is when it was first denied in the range (From when the deny
	// began in the warm-up), Last when its last deny ended as of To (may
	// be after To: nothing after To is replayed to extend it), DenySeconds
	// how long it was denied within the range.
	First       time.Time `json:"first"`
	Last        time.Time `json:"last"`
	DenySeconds float64   `json:"deny_seconds"`

	ms int64 // DenySeconds, summed exactly
}

// Change is one subject and rule denied differently by the candidate and
// the baseline.
type Change struct {
	Change    string `json:"change"` // new, gone, changed
	Action    string `json:"action"`
	Kind      string `json:"kind"`
	Subject   string `json:"subject"`
	Rule      string `json:"rule"`
	Shadow    bool   `json:"shadow"`
	Candidate *Side  `json:"candidate,omitempty"`
	Baseline  *Side  `json:"baseline,omitempty"`
}

// Side is a subject under one rule in one rules set: over all its limits.
type Side struct {
	Limits      []string  `json:"limits"`
	Decisions   int       `json:"decisions"`
	First       time.Time `json:"first"`
	Last        time.Time `json:"last"`
	DenySeconds float64   `json:"deny_seconds"`
}

// The kinds of Change.
const (
	ChangeNew     = "new"
	ChangeGone    = "gone"
	ChangeChanged = "changed"
)

// outcome builds a rules set's outcome from its merged tallies.
func outcome(name string, ts *tallies) *Outcome {
	o := &Outcome{Rules: name, Limits: []LimitSummary{}, Denies: make([]Deny, 0, len(ts.keys))}
	for k, t := range ts.keys {
		o.Denies = append(o.Denies, Deny{
			Action: k.Action, Kind: k.Kind, Subject: k.Subject, Rule: k.Rule, Limit: k.Limit, Shadow: k.Shadow,
			Decisions: t.decisions, First: msTime(t.first), Last: msTime(t.last), DenySeconds: seconds(t.total), ms: t.total,
		})
	}
	slices.SortFunc(o.Denies, func(a, b Deny) int {
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Limit, b.Limit), boolCmp(a.Shadow, b.Shadow),
			a.First.Compare(b.First), cmp.Compare(a.Action, b.Action), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Subject, b.Subject))
	})
	for _, d := range o.Denies {
		n := len(o.Limits)
		if n == 0 || o.Limits[n-1].Rule != d.Rule || o.Limits[n-1].Limit != d.Limit || o.Limits[n-1].Shadow != d.Shadow {
			o.Limits = append(o.Limits, LimitSummary{Rule: d.Rule, Limit: d.Limit, Shadow: d.Shadow, First: d.First, Last: d.Last})
			n++
		}
		s := &o.Limits[n-1]
		s.Subjects++
		s.Decisions += d.Decisions
		s.ms += d.ms
		s.DenySeconds = seconds(s.ms)
		if d.First.Before(s.First) {
			s.First = d.First
		}
		if d.Last.After(s.Last) {
			s.Last = d.Last
		}
	}
	return o
}

// sides are an outcome's subjects per rule: the limits that denied them,
// and their deny time under the rule, the union over its limits.
func sides(o *Outcome, ts *tallies) map[ruleKey]*Side {
	out := map[ruleKey]*Side{}
	for k, t := range ts.rules {
		out[k] = &Side{Decisions: t.decisions, First: msTime(t.first), Last: msTime(t.last), DenySeconds: seconds(t.total)}
	}
	for _, d := range o.Denies {
		if s := out[ruleKey{d.Action, d.Kind, d.Subject, d.Rule, d.Shadow}]; s != nil {
			s.Limits = append(s.Limits, d.Limit)
		}
	}
	for _, s := range out {
		slices.Sort(s.Limits)
	}
	return out
}

// diff compares the candidate with the baseline per subject and rule.
func diff(cand, base *Outcome, ct, bt *tallies) (changes []Change, unchanged int) {
	c, b := sides(cand, ct), sides(base, bt)
	add := func(k ruleKey, kind string, cs, bs *Side) {
		changes = append(changes, Change{Change: kind, Action: k.Action, Kind: k.Kind, Subject: k.Subject, Rule: k.Rule, Shadow: k.Shadow, Candidate: cs, Baseline: bs})
	}
	for k, cs := range c {
		bs, ok := b[k]
		switch {
		case !ok:
			add(k, ChangeNew, cs, nil)
		case !sameSide(cs, bs):
			add(k, ChangeChanged, cs, bs)
		default:
			unchanged++
		}
	}
	for k, bs := range b {
		if _, ok := c[k]; !ok {
			add(k, ChangeGone, nil, bs)
		}
	}
	order := map[string]int{ChangeNew: 0, ChangeGone: 1, ChangeChanged: 2}
	slices.SortFunc(changes, func(x, y Change) int {
		return cmp.Or(cmp.Compare(order[x.Change], order[y.Change]), cmp.Compare(x.Rule, y.Rule), boolCmp(x.Shadow, y.Shadow),
			cmp.Compare(x.Action, y.Action), cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Subject, y.Subject))
	})
	return changes, unchanged
}

func sameSide(a, b *Side) bool {
	return slices.Equal(a.Limits, b.Limits) && a.Decisions == b.Decisions && a.First.Equal(b.First) &&
		a.Last.Equal(b.Last) && a.DenySeconds == b.DenySeconds
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func seconds(ms int64) float64 { return float64(ms) / 1000 }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// limitsText joins a side's limits for tables.
func limitsText(ls []string) string { return strings.Join(ls, ", ") }

// NewDenies counts what --exit-code gates on: the subjects and rules the
// candidate denies and the baseline did not (every one it denies without
// a baseline); a shadow rule denies nobody, so its records do not count.
func (rep *Report) NewDenies() int {
	n := 0
	if rep.Baseline == nil {
		for _, d := range rep.Candidate.Denies {
			if !d.Shadow {
				n++
			}
		}
		return n
	}
	for _, ch := range rep.Changes {
		if ch.Change == ChangeNew && !ch.Shadow {
			n++
		}
	}
	return n
}
