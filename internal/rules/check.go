package rules

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// Effective is one rule in force for one action and kind: a rule with
// kinds [ip, email] is two of them.
type Effective struct {
	Action, Kind string
	Rule         *Rule
}

// Effective returns what the set enforces, sorted by action and kind, the
// rules of one action and kind in file order (the order Match returns).
func (s *Set) Effective() []Effective {
	if s == nil {
		return nil
	}
	keys := make([]matchKey, 0, len(s.match))
	for k := range s.match {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].action != keys[j].action {
			return keys[i].action < keys[j].action
		}
		return keys[i].kind < keys[j].kind
	})
	var out []Effective
	for _, k := range keys {
		for _, r := range s.match[k] {
			out = append(out, Effective{Action: k.action, Kind: k.kind, Rule: r})
		}
	}
	return out
}

// AllowSize is the number of entries of the rule's allowlist (exact values
// and CIDR ranges).
func (r *Rule) AllowSize() int { return len(r.allowExact) + len(r.allowNets) }

// FindingType says what a Finding is about.
type FindingType string

const (
	// Overlap: two enforced rules of one action and kind count the same
	// thing (events, or the same distinct kind) over the same window.
	Overlap FindingType = "overlap"
	// Unreachable: a rule that can never deny before another one does.
	Unreachable FindingType = "unreachable"
	// EmptyPlan: a rule overrides a plan no subject of its kind is on (a
	// misspelt plan, or a plans: table that lost its entries).
	EmptyPlan FindingType = "empty-plan"
)

// Finding is a warning about a valid rules file: the file is enforced as
// written, but it likely does not say what its author meant.
type Finding struct {
	Type         FindingType
	Action, Kind string
	Rule         string        // the rule warned about
	Other        string        // the rule it overlaps, or that makes it unreachable
	Window       time.Duration // Overlap: the shared window
	Plan         string        // EmptyPlan: the plan
	Line         int           // the line of Rule (of the override for EmptyPlan)
}

// String is the warning without its line: "overlap: rules ...".
func (f Finding) String() string {
	switch f.Type {
	case EmptyPlan:
		return fmt.Sprintf("empty plan: rule %q overrides plan %q, and the plans: table puts no subject of its kinds (%s) on it", f.Rule, f.Plan, f.Kind)
	case Overlap:
		return fmt.Sprintf("overlap: rules %q and %q both limit %s/%s over %s", f.Other, f.Rule, f.Action, f.Kind, FormatWindow(f.Window))
	default:
		return fmt.Sprintf("unreachable: rule %q never denies %s/%s before rule %q does (each of its limits is at least as loose as %q's limit of the same window)", f.Rule, f.Action, f.Kind, f.Other, f.Other)
	}
}

// Check returns the warnings about a valid set, per action and kind, in the
// order of Effective. Only enforced rules (not shadow) are compared, and
// only rules that count the same thing (events, or the same distinct kind)
// with the same strict setting: a strict rule counts at request time, a
// plain one from the stream, so neither stands in for the other.
//
// Overlap: two such rules both have a limit with the same window.
//
// Unreachable: rule R, without a bucket, is unreachable when an earlier
// or later such rule O, without an allowlist, has for every limit of R a
// limit of the same window whose count is at most R's. O then denies every
// event R would deny, no later than R. When R and O have the same limits,
// only the later of the two in the file is reported.
func (s *Set) Check() []Finding {
	var out []Finding
	eff := s.Effective()
	for i := 0; i < len(eff); {
		j := i
		for j < len(eff) && eff[j].Action == eff[i].Action && eff[j].Kind == eff[i].Kind {
			j++
		}
		out = append(out, checkGroup(eff[i].Action, eff[i].Kind, eff[i:j])...)
		i = j
	}
	for _, r := range s.Rules() {
		out = append(out, s.emptyPlans(r)...)
	}
	return out
}

// emptyPlans warns of r's overrides whose plan has no subject of any of
// r's kinds.
func (s *Set) emptyPlans(r *Rule) []Finding {
	var out []Finding
	for _, o := range r.overrides {
		if o.Plan == "" || slices.ContainsFunc(r.Kinds, func(k string) bool {
			return slices.Contains(slices.Collect(maps.Values(s.plans[k])), o.Plan)
		}) {
			continue
		}
		out = append(out, Finding{Type: EmptyPlan, Action: r.Action, Kind: strings.Join(r.Kinds, ", "), Rule: r.Name, Plan: o.Plan, Line: o.Line})
	}
	return out
}

// PlanSize is how many subjects of a kind the plans: table puts on a plan.
type PlanSize struct {
	Kind, Plan string
	Subjects   int
}

// PlanSizes returns the plans: table's plans per kind, sorted.
func (s *Set) PlanSizes() []PlanSize {
	if s == nil {
		return nil
	}
	n := map[[2]string]int{}
	for kind, subs := range s.plans {
		for _, plan := range subs {
			n[[2]string{kind, plan}]++
		}
	}
	out := make([]PlanSize, 0, len(n))
	for k, c := range n {
		out = append(out, PlanSize{Kind: k[0], Plan: k[1], Subjects: c})
	}
	slices.SortFunc(out, func(a, b PlanSize) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Plan, b.Plan)) })
	return out
}

func checkGroup(action, kind string, group []Effective) []Finding {
	var out []Finding
	alike := func(a, b *Rule) bool {
		return a != b && !a.Shadow && !b.Shadow && a.Distinct == b.Distinct && a.Strict == b.Strict
	}
	for i, e := range group {
		r := e.Rule
		for _, p := range group[:i] {
			o := p.Rule
			if !alike(r, o) {
				continue
			}
			for _, l := range r.Limits {
				if slices.ContainsFunc(o.Limits, func(m Limit) bool { return m.Window == l.Window }) {
					out = append(out, Finding{Type: Overlap, Action: action, Kind: kind, Rule: r.Name, Other: o.Name, Window: l.Window, Line: r.Line})
				}
			}
		}
		for k, p := range group {
			o := p.Rule
			if !alike(r, o) || r.Bucket != nil || o.AllowSize() > 0 || !covers(o, r) {
				continue
			}
			if k > i && o.Bucket == nil && r.AllowSize() == 0 && covers(r, o) {
				continue // the same limits, each unreachable by the other: report the later
			}
			out = append(out, Finding{Type: Unreachable, Action: action, Kind: kind, Rule: r.Name, Other: o.Name, Line: r.Line})
			break
		}
	}
	return out
}

// covers reports whether o has, for every limit of r, a limit of the same
// window with a count at most r's.
func covers(o, r *Rule) bool {
	if len(r.Limits) == 0 {
		return false
	}
	for _, l := range r.Limits {
		if !slices.ContainsFunc(o.Limits, func(m Limit) bool { return m.Window == l.Window && m.Count <= l.Count }) {
			return false
		}
	}
	return true
}

// Describe is the rule's limits in the rules file's words: "limits: 2/1s
// 5/1m", "bucket: {rate: 10/1s, burst: 50}", "distinct email: 20/1h",
// joined by "; ".
func (r *Rule) Describe() string {
	var ls []string
	for _, l := range r.Limits {
		ls = append(ls, l.String())
	}
	var parts []string
	if len(ls) > 0 {
		name := "limits"
		if r.Distinct != "" {
			name = "distinct " + r.Distinct
		}
		parts = append(parts, name+": "+strings.Join(ls, " "))
	}
	if r.Bucket != nil {
		parts = append(parts, "bucket: "+r.Bucket.String())
	}
	for _, o := range r.overrides {
		if o.Plan == "" {
			parts = append(parts, fmt.Sprintf("%d subjects: %s", len(o.Subjects), strings.TrimPrefix(o.String(), "subject: ")))
			continue
		}
		parts = append(parts, o.String())
	}
	return strings.Join(parts, "; ")
}
