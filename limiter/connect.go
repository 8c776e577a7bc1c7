package limiter

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	floodgatev1 "floodgate/gen/floodgate/v1"
	"floodgate/gen/floodgate/v1/floodgatev1connect"
)

// connectService serves floodgate.v1.Limiter (gRPC, gRPC-Web, Connect).
type connectService struct{ l *Limiter }

var _ floodgatev1connect.LimiterHandler = (*connectService)(nil)

func (s *connectService) Check(ctx context.Context, req *connect.Request[floodgatev1.CheckRequest]) (*connect.Response[floodgatev1.CheckResponse], error) {
	d, err := s.l.Check(ctx, Request{Action: req.Msg.GetAction(), Subjects: subjectsFromProto(req.Msg.GetSubjects())})
	if err != nil {
		return nil, s.fail(err)
	}
	s.count(d)
	r := DecisionToProto(d)
	return connect.NewResponse(&floodgatev1.CheckResponse{
		Allowed: r.Allowed, Denial: r.Denial, Limits: r.Limits, ShadowDenials: r.ShadowDenials, Degraded: r.Degraded,
	}), nil
}

func (s *connectService) Take(ctx context.Context, req *connect.Request[floodgatev1.TakeRequest]) (*connect.Response[floodgatev1.TakeResponse], error) {
	d, err := s.l.Take(ctx, Request{Action: req.Msg.GetAction(), Subjects: subjectsFromProto(req.Msg.GetSubjects()), N: req.Msg.GetN(), ID: req.Msg.GetId()})
	if err != nil {
		return nil, s.fail(err)
	}
	s.count(d)
	r := DecisionToProto(d)
	return connect.NewResponse(&floodgatev1.TakeResponse{
		Allowed: r.Allowed, Denial: r.Denial, Limits: r.Limits, ShadowDenials: r.ShadowDenials, Degraded: r.Degraded, Counted: d.Counted,
	}), nil
}

func (s *connectService) count(d Decision) {
	outcome := "ok"
	if !d.Allowed {
		outcome = "over_limit"
	}
	s.l.m.requests.WithLabelValues("connect", outcome).Inc()
}

func (s *connectService) fail(err error) error {
	s.l.m.requests.WithLabelValues("connect", "invalid").Inc()
	return errorToConnect(err)
}

// errorToConnect maps limiter errors to Connect codes.
func errorToConnect(err error) error {
	switch ErrorCode(err) {
	case CodeInvalid:
		return connect.NewError(connect.CodeInvalidArgument, err)
	case CodeUnauthenticated:
		return connect.NewError(connect.CodeUnauthenticated, err)
	case CodeTooLarge:
		return connect.NewError(connect.CodeResourceExhausted, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

// authInterceptor requires "Authorization: Bearer <token>" on every RPC.
func authInterceptor(token string, m *metrics) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if !tokenOK(token, req.Header().Get("Authorization")) {
				m.requests.WithLabelValues("connect", "unauthenticated").Inc()
				return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("missing or wrong bearer token"))
			}
			return next(ctx, req)
		}
	}
}

func subjectsFromProto(ps []*floodgatev1.Subject) []Subject {
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
		out[i] = &floodgatev1.Subject{Kind: s.Kind, Subject: s.Subject}
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
			Shadow: l.Shadow, Strict: l.Strict, Exceeded: l.Exceeded, Allowlisted: l.Allowlisted,
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
		Count: d.Count, Message: d.Message, RetryAfter: durationpb.New(d.RetryAfter), Shadow: d.Shadow,
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
			Shadow: l.GetShadow(), Strict: l.GetStrict(), Exceeded: l.GetExceeded(), Allowlisted: l.GetAllowlisted(),
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
		Count: p.GetCount(), Message: p.GetMessage(), RetryAfter: retry, Until: now.Add(retry), Shadow: p.GetShadow(),
	}
}
