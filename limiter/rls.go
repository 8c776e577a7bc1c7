package limiter

import (
	"context"
	"time"

	"floodgate/limitapi"
	"floodgate/rules"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// RLSMode says what ShouldRateLimit does.
type RLSMode int

const (
	// RLSCheck only checks (Limiter.Check): the application publishes the
	// events. The default.
	RLSCheck RLSMode = iota
	// RLSTake checks and counts (Limiter.Take with hits_addend): strict
	// rules in Redis, the rest published for the aggregator.
	RLSTake
)

// ParseRLSMode parses "check" or "take".
func ParseRLSMode(s string) (RLSMode, error) {
	switch s {
	case "check":
		return RLSCheck, nil
	case "take":
		return RLSTake, nil
	}
	return 0, invalidf("rls mode %q: want check or take", s)
}

// rlsService is envoy.service.ratelimit.v3.RateLimitService: the domain is
// the action, every descriptor a subject (rlsSubject: one entry's key and
// value are its kind and subject; several entries make one composite
// subject). All descriptors are decided together, in one Redis round trip.
// A request with an invalid part is still answered OVER_LIMIT when a valid
// subject is over a limit (Limiter.Check); InvalidArgument only when nothing
// denies, which Envoy with failure_mode_deny: true turns into a denial
// (docs/limiter.md recommends it).
type rlsService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	l    *Limiter
	mode RLSMode
	// noOKHeaders leaves the RateLimit fields out of OK answers.
	noOKHeaders bool
}

var _ rlsv3.RateLimitServiceServer = (*rlsService)(nil)

func (s *rlsService) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	defer s.l.m.observe("rls", time.Now())
	n, checkOnly := rlsHitsAddend(in)
	req := Request{Action: in.GetDomain(), N: n}
	owner := make([]int, 0, len(in.GetDescriptors())) // subject -> descriptor
	set := s.l.cfg.Rules()
	for i, desc := range in.GetDescriptors() {
		if len(desc.GetEntries()) == 0 {
			continue
		}
		req.Subjects = append(req.Subjects, rlsSubject(set, desc))
		owner = append(owner, i)
	}
	var d Decision
	var err error
	if s.mode == RLSTake && !checkOnly {
		d, err = s.l.Take(ctx, req)
	} else {
		d, err = s.l.Check(ctx, req)
	}
	if err != nil {
		s.l.m.requests.WithLabelValues("rls", "invalid").Inc()
		return nil, errorToGRPC(err)
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(in.GetDescriptors()))
	for i := range resp.Statuses {
		resp.Statuses[i] = s.status(d, req.Subjects, owner, i)
		if resp.Statuses[i].Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if !d.Allowed {
		// Whichever descriptor it belongs to, a denial is the answer.
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	outcome := "ok"
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		outcome = "over_limit"
		pol, cur, retry := limitapi.Fields(d)
		for _, f := range [...]struct{ k, v string }{
			{limitapi.HeaderRateLimitPolicy, pol}, {limitapi.HeaderRateLimit, cur}, {limitapi.HeaderRetryAfter, retry},
		} {
			if f.v != "" {
				resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: f.k, Value: f.v})
			}
		}
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OK && !s.noOKHeaders {
		resp.ResponseHeadersToAdd = rlsOKHeaders(d)
	}
	s.l.m.requests.WithLabelValues("rls", outcome).Inc()
	return resp, nil
}

// status is descriptor i's answer: OVER_LIMIT with the denying limit when
// one of its subjects is denied, otherwise OK with its enforced limit that
// has the least quota left.
func (s *rlsService) status(d Decision, subs []Subject, owner []int, i int) *rlsv3.RateLimitResponse_DescriptorStatus {
	mine := func(kind, subject string) bool {
		for k, o := range owner {
			if o == i && subs[k].Kind == kind && subs[k].Subject == subject {
				return true
			}
		}
		return false
	}
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if den := d.Denial; den != nil && (den.Kind == "" || mine(den.Kind, den.Subject)) {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		st.DurationUntilReset = durationpb.New(roundUp(den.RetryAfter))
		if den.Rule != "" {
			st.CurrentLimit = rlsLimitOf(den.Rule, den.Kind, den.Limit, den.Window, den.Rate)
		}
		return st
	}
	var best *Limit
	for k := range d.Limits {
		l := &d.Limits[k]
		if l.Shadow || l.Allowlisted || !mine(l.Kind, l.Subject) {
			continue
		}
		if l.Exceeded {
			// Over, but the decision chose a longer denial elsewhere.
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			if best == nil || !best.Exceeded || l.ResetAfter > best.ResetAfter {
				best = l
			}
			continue
		}
		if best == nil || (!best.Exceeded && l.Remaining < best.Remaining) {
			best = l
		}
	}
	if best != nil {
		st.CurrentLimit = rlsLimitOf(best.Rule, best.Kind, best.Limit, best.Window, best.Rate)
		if !best.Exceeded {
			st.LimitRemaining = uint32(min(best.Remaining, int64(^uint32(0))))
		}
		st.DurationUntilReset = durationpb.New(roundUp(best.ResetAfter))
	}
	return st
}

// rlsLimitOf is a limit, or a bucket rule by its rate, in Envoy's terms.
func rlsLimitOf(rule, kind string, count int64, w time.Duration, rate string) *rlsv3.RateLimitResponse_RateLimit {
	if rate != "" {
		if r, err := rules.ParseLimit(rate); err == nil {
			return rlsLimit(rule+"/"+kind+"/bucket", r.Count, r.Window)
		}
	}
	return rlsLimit(limitapi.PolicyName(rule, kind, w), count, w)
}

// rlsLimit expresses a window in Envoy's units: the largest unit that
// divides it, with a multiplier ("5m" = 5 MINUTE).
func rlsLimit(name string, count int64, w time.Duration) *rlsv3.RateLimitResponse_RateLimit {
	unit, size := rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second
	switch {
	case w%(24*time.Hour) == 0:
		unit, size = rlsv3.RateLimitResponse_RateLimit_DAY, 24*time.Hour
	case w%time.Hour == 0:
		unit, size = rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour
	case w%time.Minute == 0:
		unit, size = rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute
	}
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: uint32(min(count, int64(^uint32(0)))), Unit: unit}
	if mult := w / size; mult > 1 {
		rl.UnitMultiplier = wrapperspb.UInt32(uint32(mult))
	}
	return rl
}

func roundUp(d time.Duration) time.Duration {
	return time.Duration(limitapi.RetrySeconds(d)) * time.Second
}

// errorToGRPC maps limiter errors to gRPC status codes.
func errorToGRPC(err error) error {
	switch ErrorCode(err) {
	case CodeInvalid:
		return status.Error(codes.InvalidArgument, err.Error())
	case CodeUnauthenticated:
		return status.Error(codes.Unauthenticated, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// grpcAuth requires "authorization: Bearer <token>" metadata.
func grpcAuth(token string, m *metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		var h string
		if v := md.Get("authorization"); len(v) > 0 {
			h = v[0]
		}
		if !tokenOK(token, h) {
			m.requests.WithLabelValues("rls", "unauthenticated").Inc()
			return nil, errorToGRPC(&Error{Code: CodeUnauthenticated, Msg: "missing or wrong bearer token"})
		}
		return next(ctx, req)
	}
}
