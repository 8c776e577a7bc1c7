package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// Inspect reads everything about req's subjects at now: it writes nothing.
func (o *Operator) Inspect(ctx context.Context, req Request) (Inspection, error) {
	set := o.cfg.Rules()
	if err := o.validateInspect(&req, set); err != nil {
		o.actions.WithLabelValues("inspect", "invalid").Inc()
		return Inspection{}, err
	}
	in, err := o.inspect(ctx, req, set)
	if err != nil {
		o.actions.WithLabelValues("inspect", "error").Inc()
		return Inspection{}, err
	}
	o.actions.WithLabelValues("inspect", "ok").Inc()
	return in, nil
}

func (o *Operator) validateInspect(req *Request, set *rules.Set) error {
	if o.cfg.Checker == nil {
		return errors.New("operator: inspect needs a checker")
	}
	if req.Rule != "" || req.For != 0 || req.Message != "" {
		return invalidf("inspect takes no rule, duration or message")
	}
	return validateSubjects(req, set)
}

// inspect reads req's subjects, which validateSubjects gave as set counts
// them.
func (o *Operator) inspect(ctx context.Context, req Request, set *rules.Set) (Inspection, error) {
	now := o.cfg.Now()
	in := Inspection{Action: req.Action, At: now}
	check := limitapi.Request{Action: req.Action, Subjects: req.Subjects}
	mem, err := o.cfg.Checker.Check(ctx, check)
	if err != nil {
		return Inspection{}, fmt.Errorf("inspect %s: check: %w", req.Action, err)
	}
	check.Exact = true
	exact, err := o.cfg.Checker.Check(ctx, check)
	if err != nil {
		return Inspection{}, fmt.Errorf("inspect %s: exact check: %w", req.Action, err)
	}
	for _, s := range req.Subjects {
		sub := window.Subject{Action: req.Action, Kind: s.Kind, Subject: s.Subject}
		p, err := o.cfg.Store.PartitionOf(sub)
		if err != nil {
			return Inspection{}, err
		}
		rec, err := o.cfg.Store.Records(ctx, now, sub)
		if err != nil {
			return Inspection{}, fmt.Errorf("inspect: %w", err)
		}
		si := SubjectInspection{Kind: s.Kind, Subject: s.Subject, Partition: p, Rules: ruleViews(set, req.Action, s, exact),
			Deny: denyView(rec.Deny, now), Shadow: denyView(rec.Shadow, now), Ban: banView(rec.Ban, now), State: stateView(rec.State)}
		in.Subjects = append(in.Subjects, si)
	}
	in.Memory = checkView(mem, in.Subjects, now)
	in.Exact = checkView(exact, in.Subjects, now)
	if in.Memory.Allowed && !in.Exact.Allowed && !exact.Degraded {
		in.Memory.Why = append(in.Memory.Why, "memory allows while the exact counts deny: the counts are over a limit that no decision stands for "+
			"(an unban keeps the counts; or events counted since the aggregator last evaluated the subject); its next counted event decides again")
	}
	return in, nil
}

// ruleViews lists the rules of the action and kind with the exact check's
// counts of every limit.
func ruleViews(set *rules.Set, action string, s limitapi.Subject, exact limitapi.Decision) []RuleView {
	var out []RuleView
	for _, r := range set.Match(action, s.Kind) {
		rv := RuleView{Rule: r.Name, Shadow: r.Shadow, Strict: r.Strict, Allowlisted: r.Allowed(s.Subject), Distinct: r.Distinct, Limits: []LimitView{}}
		if _, ov := set.Limits(r, s.Kind, s.Subject); ov != nil {
			rv.Override = ov.String()
		}
		for _, l := range exact.Limits {
			if l.Rule != r.Name || l.Kind != s.Kind || l.Subject != s.Subject {
				continue
			}
			lv := LimitView{Rate: l.Rate, Limit: l.Limit, Window: rules.FormatWindow(l.Window), Count: l.Count, Remaining: l.Remaining, Exceeded: l.Exceeded}
			if l.Exceeded {
				lv.RetryAfter = limitapi.RetrySeconds(l.ResetAfter)
			}
			rv.Limits = append(rv.Limits, lv)
		}
		out = append(out, rv)
	}
	return out
}

func denyView(d *window.Deny, now time.Time) *DenyView {
	if d == nil {
		return nil
	}
	v := &DenyView{Rule: d.Rule, Limit: d.Limit.Count, Window: rules.FormatWindow(d.Limit.Window), Count: d.Count,
		Until: d.Until, RetryAfter: limitapi.RetrySeconds(d.Until.Sub(now)), Message: d.Message}
	if d.Bucket != nil {
		v.Rate, v.Window = d.Bucket.Rate.String(), ""
	}
	if !d.Since.IsZero() {
		v.Since = &d.Since
	}
	return v
}

func banView(b *window.Ban, now time.Time) *BanView {
	if b == nil {
		return nil
	}
	return &BanView{Operator: b.Operator, Since: b.Since, Until: b.Until, RetryAfter: limitapi.RetrySeconds(b.Until.Sub(now)), Message: b.Message}
}

func stateView(st *window.SubjectState) *StateView {
	if st == nil {
		return nil
	}
	v := &StateView{At: st.At}
	for _, l := range st.Limits {
		lv := StateLimitView{Rule: l.Rule, Limit: l.Limit.Count, Window: rules.FormatWindow(l.Limit.Window), Count: l.Count}
		if !l.Until.IsZero() {
			lv.Until = &l.Until
		}
		v.Limits = append(v.Limits, lv)
	}
	return v
}

// checkView explains a decision: what denies, or why nothing does.
func checkView(d limitapi.Decision, subs []SubjectInspection, now time.Time) CheckView {
	v := CheckView{Allowed: d.Allowed, Degraded: d.Degraded, Result: limitapi.Result(d)}
	if d.Degraded {
		v.Why = append(v.Why, "Redis failed or timed out: the failure mode answered, nothing was read")
		return v
	}
	switch den := d.Denial; {
	case den == nil:
		v.Why = append(v.Why, "allowed: no enforced limit is exceeded and no subject is banned")
	case den.Banned:
		v.Why = append(v.Why, banWhy(den, subs, now))
	case den.Rate != "":
		v.Why = append(v.Why, fmt.Sprintf("denied by bucket rule %s: %s %s has used %d of its burst of %d (refilling at %s); one more fits in %ds",
			den.Rule, den.Kind, den.Subject, den.Count, den.Limit, den.Rate, limitapi.RetrySeconds(den.RetryAfter)))
	default:
		v.Why = append(v.Why, fmt.Sprintf("denied by rule %s: %s %s has %d events in its %s window, limit %d; one more fits in %ds",
			den.Rule, den.Kind, den.Subject, den.Count, rules.FormatWindow(den.Window), den.Limit, limitapi.RetrySeconds(den.RetryAfter)))
	}
	for _, l := range d.Limits {
		if l.Allowlisted && l.Exceeded {
			v.Why = append(v.Why, fmt.Sprintf("rule %s allowlists %s %s: over %d/%s, never denied by it", l.Rule, l.Kind, l.Subject, l.Limit, rules.FormatWindow(l.Window)))
		}
	}
	for _, s := range d.ShadowDenials {
		v.Why = append(v.Why, fmt.Sprintf("shadow rule %s would deny %s %s (%d events in %s, limit %d): recorded, never denied",
			s.Rule, s.Kind, s.Subject, s.Count, rules.FormatWindow(s.Window), s.Limit))
	}
	for _, si := range subs {
		switch held, allowed := memoryOf(d.Limits, si); {
		case allowed:
			v.Why = append(v.Why, fmt.Sprintf("%s %s is allowlisted by every rule of it: never denied by a rule, never held in memory", si.Kind, si.Subject))
		case !held:
			v.Why = append(v.Why, fmt.Sprintf("%s %s is not held in memory: under half of every limit as last evaluated (counts estimated)", si.Kind, si.Subject))
		}
	}
	return v
}

func banWhy(den *limitapi.Denial, subs []SubjectInspection, now time.Time) string {
	by := ""
	for _, si := range subs {
		if si.Kind == den.Kind && si.Subject == den.Subject && si.Ban != nil {
			by = fmt.Sprintf(" by %s since %s", si.Ban.Operator, si.Ban.Since.Format(time.RFC3339))
		}
	}
	return fmt.Sprintf("denied: %s %s is banned%s until %s (%ds): %q", den.Kind, den.Subject, by,
		den.Until.UTC().Format(time.RFC3339), limitapi.RetrySeconds(den.Until.Sub(now)), den.Message)
}

// memoryOf tells, of a subject's limits in a decision, whether any was
// answered with a count (held: not every one estimated) and whether every
// one is allowlisted.
func memoryOf(ls []limitapi.Limit, si SubjectInspection) (held, allowlisted bool) {
	n, est, allow := 0, 0, 0
	for _, l := range ls {
		if l.Kind == si.Kind && l.Subject == si.Subject {
			n++
			if l.Estimated {
				est++
			}
			if l.Allowlisted {
				allow++
			}
		}
	}
	return est < n, n > 0 && allow == n
}
