package limitapi

import (
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-dev/floodgate/event"
	floodgatev1 "github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1"
)

// SubjectsFromProto converts the subjects of a request.
func SubjectsFromProto(ps []*floodgatev1.Subject) []Subject {
	out := make([]Subject, len(ps))
	for i, p := range ps {
		out[i] = Subject{Kind: p.GetKind(), Subject: p.GetSubject()}
	}
	return out
}

// SubjectsToProto converts subjects for a request.
func SubjectsToProto(ss []Subject) []*floodgatev1.Subject {
	out := make([]*floodgatev1.Subject, len(ss))
	for i, s := range ss {
		// A subject that is not valid as it stands (an untrimmed form
		// value, invalid UTF-8) travels as its digest: proto3 refuses
		// invalid UTF-8, and a request that fails to marshal is no answer
		// at all. A kind with invalid UTF-8 stays invalid, for the
		// limiter to refuse.
		out[i] = &floodgatev1.Subject{Kind: strings.ToValidUTF8(s.Kind, "\uFFFD"), Subject: event.CanonicalSubject(s.Subject)}
	}
	return out
}

// DecisionToProto converts a decision to the wire form (as a TakeResponse,
// the superset of CheckResponse).
func DecisionToProto(d Decision) *floodgatev1.TakeResponse {
	r := &floodgatev1.TakeResponse{Allowed: d.Allowed, Degraded: d.Degraded, Counted: d.Counted}
	if d.Denial != nil {
		r.Denial = denialToProto(*d.Denial)
	}
	r.Limits = make([]*floodgatev1.Limit, len(d.Limits))
	for i, l := range d.Limits {
		r.Limits[i] = &floodgatev1.Limit{
			Rule: l.Rule, Kind: l.Kind, Subject: l.Subject, Limit: l.Limit, Window: durationpb.New(l.Window),
			Count: l.Count, Remaining: l.Remaining, ResetAfter: durationpb.New(l.ResetAfter),
			Shadow: l.Shadow, Strict: l.Strict, Exceeded: l.Exceeded, Allowlisted: l.Allowlisted, Estimated: l.Estimated, Rate: l.Rate,
		}
	}
	for _, s := range d.ShadowDenials {
		r.ShadowDenials = append(r.ShadowDenials, denialToProto(s))
	}
	return r
}

func denialToProto(d Denial) *floodgatev1.Denial {
	p := &floodgatev1.Denial{
		Rule: d.Rule, Kind: d.Kind, Subject: d.Subject, Limit: d.Limit,
		Count: d.Count, Message: d.Message, RetryAfter: durationpb.New(d.RetryAfter), Shadow: d.Shadow, Rate: d.Rate,
	}
	if d.Window > 0 {
		p.Window = durationpb.New(d.Window)
	}
	return p
}

// DecisionFromProto converts the wire form back; now is the time the
// answer arrived (Denial.Until = now + retry).
func DecisionFromProto(r *floodgatev1.TakeResponse, now time.Time) Decision {
	d := Decision{Allowed: r.GetAllowed(), Degraded: r.GetDegraded(), Counted: r.GetCounted(), Time: now}
	if r.GetDenial() != nil {
		den := denialFromProto(r.GetDenial(), now)
		d.Denial = &den
	}
	for _, l := range r.GetLimits() {
		d.Limits = append(d.Limits, Limit{
			Rule: l.GetRule(), Kind: l.GetKind(), Subject: l.GetSubject(), Limit: l.GetLimit(), Window: l.GetWindow().AsDuration(),
			Count: l.GetCount(), Remaining: l.GetRemaining(), ResetAfter: l.GetResetAfter().AsDuration(),
			Shadow: l.GetShadow(), Strict: l.GetStrict(), Exceeded: l.GetExceeded(), Allowlisted: l.GetAllowlisted(), Estimated: l.GetEstimated(), Rate: l.GetRate(),
		})
	}
	for _, s := range r.GetShadowDenials() {
		d.ShadowDenials = append(d.ShadowDenials, denialFromProto(s, now))
	}
	return d
}

func denialFromProto(p *floodgatev1.Denial, now time.Time) Denial {
	retry := p.GetRetryAfter().AsDuration()
	return Denial{
		Rule: p.GetRule(), Kind: p.GetKind(), Subject: p.GetSubject(), Limit: p.GetLimit(), Window: p.GetWindow().AsDuration(),
		Count: p.GetCount(), Message: p.GetMessage(), RetryAfter: retry, Until: now.Add(retry), Shadow: p.GetShadow(), Rate: p.GetRate(),
	}
}
