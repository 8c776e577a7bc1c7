package adminapi

import (
	"fmt"
	"strings"
	"time"
)

// Text renders an inspection for a terminal.
func (in Inspection) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "action %s at %s\n", in.Action, in.At.UTC().Format(time.RFC3339))
	for _, s := range in.Subjects {
		fmt.Fprintf(&b, "\n%s %s (partition %d)\n", s.Kind, s.Subject, s.Partition)
		if len(s.Rules) == 0 {
			b.WriteString("  no rule of the action applies to this kind\n")
		}
		for _, r := range s.Rules {
			fmt.Fprintf(&b, "  rule %s%s\n", r.Rule, flags(r))
			for _, l := range r.Limits {
				if l.Rate != "" {
					fmt.Fprintf(&b, "    bucket %s burst %d  used %d  remaining %d", l.Rate, l.Limit, l.Count, l.Remaining)
				} else {
					fmt.Fprintf(&b, "    %d/%s  count %d  remaining %d", l.Limit, l.Window, l.Count, l.Remaining)
				}
				if l.Exceeded {
					fmt.Fprintf(&b, "  EXCEEDED, one more fits in %ds", l.RetryAfter)
				}
				b.WriteByte('\n')
			}
		}
		if s.Ban != nil {
			fmt.Fprintf(&b, "  ban: by %s since %s until %s (%ds): %q\n", s.Ban.Operator, s.Ban.Since.UTC().Format(time.RFC3339),
				s.Ban.Until.UTC().Format(time.RFC3339), s.Ban.RetryAfter, s.Ban.Message)
		}
		for _, d := range []struct {
			name string
			v    *DenyView
		}{{"deny record", s.Deny}, {"shadow record", s.Shadow}} {
			if d.v == nil {
				continue
			}
			since := ""
			if d.v.Since != nil {
				since = " since " + d.v.Since.UTC().Format(time.RFC3339)
			}
			limit := fmt.Sprintf("%d/%s", d.v.Limit, d.v.Window)
			if d.v.Rate != "" {
				limit = fmt.Sprintf("bucket %s burst %d", d.v.Rate, d.v.Limit)
			}
			fmt.Fprintf(&b, "  %s: rule %s %s, %d events%s until %s (%ds)\n", d.name, d.v.Rule, limit, d.v.Count,
				since, d.v.Until.UTC().Format(time.RFC3339), d.v.RetryAfter)
		}
		if s.State != nil {
			fmt.Fprintf(&b, "  limiters' memory (evaluated %s):", s.State.At.UTC().Format(time.RFC3339))
			for _, l := range s.State.Limits {
				fmt.Fprintf(&b, " %s %d/%s count %d", l.Rule, l.Limit, l.Window, l.Count)
				if l.Until != nil {
					fmt.Fprintf(&b, " until %s", l.Until.UTC().Format(time.RFC3339))
				}
				b.WriteByte(';')
			}
			b.WriteByte('\n')
		} else {
			b.WriteString("  limiters' memory: nothing (under half of every limit)\n")
		}
	}
	for _, c := range []struct {
		name string
		v    CheckView
	}{{"check (memory)", in.Memory}, {"check (exact)", in.Exact}} {
		verdict := "ALLOWED"
		if !c.v.Allowed {
			verdict = "DENIED"
		}
		fmt.Fprintf(&b, "\n%s: %s\n", c.name, verdict)
		for _, w := range c.v.Why {
			fmt.Fprintf(&b, "  %s\n", w)
		}
	}
	return b.String()
}

func flags(r RuleView) string {
	var fs []string
	for _, f := range []struct {
		on   bool
		name string
	}{{r.Shadow, "shadow"}, {r.Strict, "strict"}, {r.Allowlisted, "allowlisted"}, {r.Distinct != "", "distinct " + r.Distinct}, {r.Override != "", "override " + r.Override}} {
		if f.on {
			fs = append(fs, f.name)
		}
	}
	if len(fs) == 0 {
		return ""
	}
	return " (" + strings.Join(fs, ", ") + ")"
}

// Text renders a write's result for a terminal, a line per subject.
func (r Result) Text() string {
	var b strings.Builder
	for _, s := range r.Subjects {
		fmt.Fprintf(&b, "%s %s %s %s by %s: partition %d, change %d", r.Op, r.Action, s.Kind, s.Subject, r.Operator, s.Partition, s.Seq)
		switch {
		case r.Until != nil:
			fmt.Fprintf(&b, "; banned until %s", r.Until.UTC().Format(time.RFC3339))
		case len(s.Cleared) > 0:
			fmt.Fprintf(&b, "; cleared %s", strings.Join(s.Cleared, ", "))
		default:
			b.WriteString("; nothing to clear")
		}
		if r.Op == "reset" {
			fmt.Fprintf(&b, "; %d counter keys deleted", s.DeletedKeys)
			if s.Offset != nil {
				fmt.Fprintf(&b, "; events from offset %d on are counted afresh", *s.Offset)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}
