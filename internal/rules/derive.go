package rules

// Derive returns a Set of what fn returns for each rule of s, in file
// order: the rule itself, a changed copy (c := *r; c.Limits = ...: the copy
// keeps the rule's allowlist), or nil to leave it out. fn must not modify r.
// The derived set keeps s's kinds: block, so it counts subjects as s does
// (normalized, IPv6 by prefix). A backtest from history derives the rules
// that minute buckets can answer.
func (s *Set) Derive(fn func(r *Rule) *Rule) *Set {
	var out []*Rule
	for _, r := range s.Rules() {
		if d := fn(r); d != nil {
			if d != r {
				d.rederive()
			}
			out = append(out, d)
		}
	}
	d := newSet(out)
	if s != nil {
		d.kinds, d.plans = s.kinds, s.plans
	}
	return d
}
