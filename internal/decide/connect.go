package decide

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	floodgatev1 "github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1"
	"github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1/floodgatev1connect"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// connectService serves floodgate.v1.Limiter (gRPC, gRPC-Web, Connect).
type connectService struct{ l *Limiter }

var _ floodgatev1connect.LimiterHandler = (*connectService)(nil)

func (s *connectService) Check(ctx context.Context, req *connect.Request[floodgatev1.CheckRequest]) (*connect.Response[floodgatev1.CheckResponse], error) {
	defer s.l.m.observe("connect", time.Now())
	d, err := s.l.Check(ctx, Request{Action: req.Msg.GetAction(), Subjects: limitapi.SubjectsFromProto(req.Msg.GetSubjects()), Exact: req.Msg.GetExact()})
	if err != nil {
		return nil, s.fail(err)
	}
	s.count(d)
	r := limitapi.DecisionToProto(d)
	return connect.NewResponse(&floodgatev1.CheckResponse{
		Allowed: r.Allowed, Denial: r.Denial, Limits: r.Limits, ShadowDenials: r.ShadowDenials, Degraded: r.Degraded,
	}), nil
}

func (s *connectService) Take(ctx context.Context, req *connect.Request[floodgatev1.TakeRequest]) (*connect.Response[floodgatev1.TakeResponse], error) {
	defer s.l.m.observe("connect", time.Now())
	d, err := s.l.Take(ctx, Request{Action: req.Msg.GetAction(), Subjects: limitapi.SubjectsFromProto(req.Msg.GetSubjects()), N: req.Msg.GetN(), ID: req.Msg.GetId()})
	if err != nil {
		return nil, s.fail(err)
	}
	s.count(d)
	r := limitapi.DecisionToProto(d)
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
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	}
	switch ErrorCode(err) {
	case CodeInvalid:
		return connect.NewError(connect.CodeInvalidArgument, err)
	case CodeUnauthenticated:
		return connect.NewError(connect.CodeUnauthenticated, err)
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
