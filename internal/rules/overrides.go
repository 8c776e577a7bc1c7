package rules

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxPlanSubjects bounds the plans table: it is read into every process's
// memory at each reload, and a table past it belongs in a file of its own
// generated from billing, which is still this one table.
const MaxPlanSubjects = 100_000

// Override gives some subjects of a rule other limits: the subjects named,
// or the subjects on a plan (the rules file's plans: table). The windows
// stay the rule's, only the counts change, so what is stored for a
// subject (its buckets, how far back they reach) is the same whatever its
// limits: an override takes effect at the next decision, exactly, and a
// reload that changes it moves nobody's counters.
type Override struct {
	Subjects []string // as written
	Plan     string   // the plan whose subjects it covers; "" when Subjects
	// Scale multiplies every count of the rule (rounded down, at least 1);
	// 0 when Counts gives them.
	Scale float64
	// Counts are the counts given per window; windows not named keep the
	// rule's count.
	Counts []Limit
	Line   int

	subjects map[string]struct{} // kind "\x00" subject, as each kind counts it
	limits   []Limit             // the rule's limits with the override applied
}

// Name says whom the override covers, for inspect, headers and logs:
// "plan gold" or "subject".
func (o *Override) Name() string {
	if o == nil {
		return ""
	}
	if o.Plan != "" {
		return "plan " + o.Plan
	}
	return "subject"
}

// String is the override in the rules file's words, without its subjects:
// "plan gold: scale 10", "subject: limits 50/1m".
func (o *Override) String() string {
	var what string
	if o.Scale != 0 {
		what = "scale " + strconv.FormatFloat(o.Scale, 'f', -1, 64)
	} else {
		var ls []string
		for _, l := range o.Counts {
			ls = append(ls, l.String())
		}
		what = "limits " + strings.Join(ls, " ")
	}
	return o.Name() + ": " + what
}

// Limits returns the limits of rule r for one subject of a kind (counted
// form, Subject), and the override that gave them (nil: the rule's own).
// An override naming the subject wins over one of its plan; among those,
// the first in the file. The slice is shared: do not modify it.
func (s *Set) Limits(r *Rule, kind, subject string) ([]Limit, *Override) {
	if len(r.overrides) == 0 {
		return r.Limits, nil
	}
	key := kind + "\x00" + subject
	for i := range r.overrides {
		if _, ok := r.overrides[i].subjects[key]; ok {
			return r.overrides[i].limits, &r.overrides[i]
		}
	}
	if plan := s.Plan(kind, subject); plan != "" {
		for i := range r.overrides {
			if r.overrides[i].Plan == plan {
				return r.overrides[i].limits, &r.overrides[i]
			}
		}
	}
	return r.Limits, nil
}

// Overrides returns the rule's overrides in file order. The slice is
// shared: do not modify it.
func (r *Rule) Overrides() []Override { return r.overrides }

// Plan returns the plan of a subject of a kind (counted form) in the
// plans: table, "" when it has none.
func (s *Set) Plan(kind, subject string) string {
	if s == nil {
		return ""
	}
	return s.plans[kind][subject]
}

// PlanSize is the number of subjects the plans: table names.
func (s *Set) PlanSize() int {
	n := 0
	if s != nil {
		for _, m := range s.plans {
			n += len(m)
		}
	}
	return n
}

// parsePlans reads the plans: table, kind → subject → plan:
//
//	plans:
//	  api_key:
//	    k_123: gold
//	    k_456: free
//
// Subjects are kept as written here and normalized once the kinds: block
// is known (normalizePlans).
func parsePlans(v *yaml.Node) (map[string]map[string]string, error) {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil, nil
	}
	if v.Kind != yaml.MappingNode {
		return nil, &Error{Line: v.Line, Reason: "plans: want a mapping of kind to {subject: plan}"}
	}
	out := map[string]map[string]string{}
	n := 0
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, m := v.Content[i], v.Content[i+1]
		if !nameRE.MatchString(k.Value) {
			return nil, &Error{Line: k.Line, Reason: fmt.Sprintf("plans: kind %q: only [a-z0-9_.-], 1 to 64 bytes", k.Value)}
		}
		if _, dup := out[k.Value]; dup {
			return nil, &Error{Line: k.Line, Reason: fmt.Sprintf("plans: kind %q given twice", k.Value)}
		}
		if m.Kind != yaml.MappingNode {
			return nil, &Error{Line: m.Line, Reason: fmt.Sprintf("plans: kind %q: want a mapping of subject to plan", k.Value)}
		}
		subs := map[string]string{}
		for j := 0; j+1 < len(m.Content); j += 2 {
			sk, pv := m.Content[j], m.Content[j+1]
			if sk.Kind != yaml.ScalarNode || pv.Kind != yaml.ScalarNode || strings.TrimSpace(sk.Value) == "" {
				return nil, &Error{Line: sk.Line, Reason: fmt.Sprintf("plans: kind %q: want subject: plan", k.Value)}
			}
			if !nameRE.MatchString(pv.Value) {
				return nil, &Error{Line: pv.Line, Reason: fmt.Sprintf("plans: plan %q: only [a-z0-9_.-], 1 to 64 bytes", pv.Value)}
			}
			if _, dup := subs[sk.Value]; dup {
				return nil, &Error{Line: sk.Line, Reason: fmt.Sprintf("plans: kind %q: subject %q given twice", k.Value, sk.Value)}
			}
			if n++; n > MaxPlanSubjects {
				return nil, &Error{Line: sk.Line, Reason: fmt.Sprintf("plans: more than %d subjects", MaxPlanSubjects)}
			}
			subs[sk.Value] = pv.Value
		}
		out[k.Value] = subs
	}
	return out, nil
}

// normalizePlans puts the table's subjects in their counted form. Two
// spellings of one subject on two plans make the file ambiguous: refused.
func (s *Set) normalizePlans(raw map[string]map[string]string) error {
	if len(raw) == 0 {
		return nil
	}
	s.plans = make(map[string]map[string]string, len(raw))
	for kind, subs := range raw {
		m := make(map[string]string, len(subs))
		for sub, plan := range subs {
			n := s.Subject(kind, strings.TrimSpace(sub))
			if prev, ok := m[n]; ok && prev != plan {
				return &Error{Reason: fmt.Sprintf("plans: kind %q: %q is on plans %q and %q (one subject once normalized)", kind, n, prev, plan)}
			}
			m[n] = plan
		}
		s.plans[kind] = m
	}
	return nil
}

// parseOverrides reads a rule's overrides: list:
//
//	overrides:
//	  - plan: gold
//	    scale: 10
//	  - subjects: [k_999]
//	    limits: [5/m]
func (r *Rule) parseOverrides(v *yaml.Node, fail failAt) error {
	if v.Kind != yaml.SequenceNode {
		return fail(v, "overrides: want a list of {plan or subjects, scale or limits}")
	}
	for _, n := range v.Content {
		o, err := parseOverride(n, fail)
		if err != nil {
			return err
		}
		r.overrides = append(r.overrides, o)
	}
	return nil
}

func parseOverride(n *yaml.Node, fail failAt) (Override, error) {
	o := Override{Line: n.Line}
	if n.Kind != yaml.MappingNode {
		return o, fail(n, "overrides: each is a mapping {plan or subjects, scale or limits}")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "plan":
			if err := scalar(v, &o.Plan); err != nil || !nameRE.MatchString(o.Plan) {
				return o, fail(v, "overrides: plan %q: only [a-z0-9_.-], 1 to 64 bytes", v.Value)
			}
		case "subjects", "subject":
			subs, err := stringList(v)
			if err != nil || len(subs) == 0 {
				return o, fail(v, "overrides: subjects: want a list of subjects")
			}
			o.Subjects = subs
		case "scale":
			f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v.Value), "x"), 64)
			if err != nil || v.Kind != yaml.ScalarNode || !(f > 0) || math.IsInf(f, 0) || f > 1e6 {
				return o, fail(v, "overrides: scale %q: want a number above 0 and at most 1000000, e.g. 10 or 0.5", v.Value)
			}
			o.Scale = f
		case "limits", "limit":
			items, err := stringItems(v)
			if err != nil || len(items) == 0 {
				return o, fail(v, "overrides: limits: want a list, e.g. [1000/m]")
			}
			for _, it := range items {
				l, err := ParseLimit(it.Value)
				if err != nil {
					return o, fail(it, "overrides: %v", err)
				}
				o.Counts = append(o.Counts, l)
			}
		default:
			return o, fail(k, "overrides: unknown key %q (want plan or subjects, and scale or limits)", k.Value)
		}
	}
	switch {
	case (o.Plan == "") == (o.Subjects == nil):
		return o, fail(n, "overrides: give plan or subjects (one of them)")
	case (o.Scale == 0) == (o.Counts == nil):
		return o, fail(n, "overrides: give scale or limits (one of them)")
	}
	return o, nil
}

// completeOverrides checks the overrides against the rule's limits and
// computes each one's limits.
func (r *Rule) completeOverrides(n *yaml.Node, fail failAt) error {
	if len(r.overrides) == 0 {
		return nil
	}
	if r.Bucket != nil {
		return fail(n, "overrides on a rule with a bucket: overrides change window limits only; put the bucket in a rule of its own")
	}
	plans := map[string]int{}
	for i := range r.overrides {
		o := &r.overrides[i]
		for _, c := range o.Counts {
			if !slices.ContainsFunc(r.Limits, func(l Limit) bool { return l.Window == c.Window }) {
				return fail(n, "override on line %d: limit %s: the rule has no %s window (an override changes counts, not windows)", o.Line, c, FormatWindow(c.Window))
			}
		}
		if o.Plan != "" {
			if prev, dup := plans[o.Plan]; dup {
				return fail(n, "override on line %d: plan %q already overridden on line %d", o.Line, o.Plan, prev)
			}
			plans[o.Plan] = o.Line
		}
		o.limits = o.apply(r.Limits)
	}
	return nil
}

// apply is limits with the override's counts, sorted by window as newSet
// sorts the rule's.
func (o *Override) apply(limits []Limit) []Limit {
	out := slices.Clone(limits)
	slices.SortStableFunc(out, func(a, b Limit) int { return cmp.Compare(a.Window, b.Window) })
	for i := range out {
		if o.Scale != 0 {
			out[i].Count = max(int64(math.Floor(float64(out[i].Count)*o.Scale)), 1)
			continue
		}
		for _, c := range o.Counts {
			if c.Window == out[i].Window {
				out[i].Count = c.Count
			}
		}
	}
	return out
}

// normalizeOverrides indexes the overrides' subjects as each of the rule's
// kinds counts them (Set.Subject).
func (r *Rule) normalizeOverrides(s *Set) {
	for i := range r.overrides {
		o := &r.overrides[i]
		o.subjects = map[string]struct{}{}
		for _, sub := range o.Subjects {
			for _, k := range r.Kinds {
				o.subjects[k+"\x00"+s.Subject(k, strings.TrimSpace(sub))] = struct{}{}
			}
		}
	}
}

// rederive recomputes the limits of a derived rule's overrides from its own
// limits: Derive's copy may have changed them. Windows the copy dropped are
// dropped from the overrides' counts.
func (r *Rule) rederive() {
	if len(r.overrides) == 0 {
		return
	}
	ovs := slices.Clone(r.overrides)
	for i := range ovs {
		ovs[i].limits = ovs[i].apply(r.Limits)
	}
	r.overrides = ovs
}
