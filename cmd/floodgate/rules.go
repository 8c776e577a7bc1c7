package main

import (
	"fmt"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/floodgate-dev/floodgate/internal/rules"
)

// RulesCmd groups the rules file tools.
type RulesCmd struct {
	Check RulesCheckCmd `cmd:"" help:"Validate a rules file and print what it enforces per action and kind (the CI gate of a rules change)."`
}

// RulesCheckCmd validates a rules file with the parser the limiter and the
// aggregator use, prints the effective rules and warns on likely mistakes.
type RulesCheckCmd struct {
	File string `arg:"" help:"Rules file (YAML)." type:"path"`
}

// Help is shown under the command's usage.
func (c *RulesCheckCmd) Help() string {
	return `Prints one line per action and kind a rule applies to: action, kind, rule,
its limits (bucket, distinct kind), its mode (enforce, strict, shadow) and the
size of its allowlist. Then one line per kind the rules count (distinct
kinds included): how its subjects are normalized (trim, lower, ip, or none)
and the prefix length an IPv6 subject is counted by (- for none). Then, when
the file has a plans: table, how many subjects of each kind are on each plan.
A rule's overrides show in its LIMITS column ("plan gold: scale 10",
"2 subjects: limits 50/1m").

Warnings (on stderr; the file is still valid) compare the enforced (not
shadow) rules of one action and kind that count the same thing (events, or
the same distinct kind) with the same strict setting:

  overlap      two such rules both have a limit of the same window.
  unreachable  rule R (without a bucket) never denies first: another such
               rule O, without an allowlist, has for each limit of R a limit
               of the same window with a count at most R's. Of two rules
               with the same limits, the later in the file is reported.
  empty plan   a rule overrides a plan that no subject of its kind is on.

Exit status: 0 valid (warnings or not), 1 invalid (the parser's error,
with the file and line), 2 usage error.`
}

// Run loads the file and prints the report.
func (c *RulesCheckCmd) Run(std stdio) error {
	set, err := rules.Load(c.File)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(std.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACTION\tKIND\tRULE\tLIMITS\tMODE\tALLOW")
	for _, e := range set.Effective() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Action, e.Kind, e.Rule.Name, e.Rule.Describe(), ruleMode(e.Rule), strconv.Itoa(e.Rule.AllowSize()))
	}
	fmt.Fprintln(tw, "\nKIND\tNORMALIZE\tIPV6_PREFIX")
	for _, k := range countedKinds(set) {
		o := set.Kind(k)
		prefix := "-"
		if o.IPv6Prefix > 0 {
			prefix = strconv.Itoa(o.IPv6Prefix)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", k, o.Normalize, prefix)
	}
	if plans := set.PlanSizes(); len(plans) > 0 {
		fmt.Fprintln(tw, "\nKIND\tPLAN\tSUBJECTS")
		for _, p := range plans {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", p.Kind, p.Plan, p.Subjects)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, f := range set.Check() {
		fmt.Fprintf(std.err, "%s:%d: warning: %s\n", c.File, f.Line, f)
	}
	return nil
}

// countedKinds are the kinds set's rules count, distinct kinds included,
// sorted.
func countedKinds(set *rules.Set) []string {
	var out []string
	add := func(k string) {
		if k != "" && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	for _, r := range set.Rules() {
		for _, k := range r.Kinds {
			add(k)
		}
		add(r.Distinct)
	}
	slices.Sort(out)
	return out
}

func ruleMode(r *rules.Rule) string {
	switch {
	case r.Strict && r.Shadow:
		return "strict,shadow"
	case r.Strict:
		return "strict"
	case r.Shadow:
		return "shadow"
	}
	return "enforce"
}
