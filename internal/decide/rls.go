package decide

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"

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
	var buf [DefaultMaxSubjects]int // owners on the stack: no allocation per call
	set := s.l.cfg.Rules()
	req, owner, checkOnly, bad := rlsRequest(in, set, s.l.maxSubj, buf[:0])
	dl := rlsDescriptorLimits(in, req, owner)
	d, err := s.l.decideWith(ctx, req, s.mode == RLSTake && !checkOnly, bad, dl)
	if err != nil {
		s.l.m.requests.WithLabelValues("rls", "invalid").Inc()
		return nil, errorToGRPC(err)
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	// A status per descriptor read: all of them, but for a call past the
	// bound (refused unless denied), whose answer covers the ones decided.
	ix := newRLSIndex(d, req.Subjects, owner, min(len(in.GetDescriptors()), s.l.maxSubj), set)
	resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, ix.descriptors())
	for i := range resp.Statuses {
		resp.Statuses[i] = ix.status(d, i)
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

// rlsDescriptorLimits are the limits the request's decided descriptors
// carry (owner[k] is the descriptor of subject k), nil when none does.
func rlsDescriptorLimits(in *rlsv3.RateLimitRequest, req Request, owner []int) []descriptorLimit {
	var out []descriptorLimit
	descs := in.GetDescriptors()
	for k, i := range owner {
		if dl, ok := rlsDescriptorLimit(req.Subjects[k], descs[i]); ok {
			out = append(out, dl)
		}
	}
	return out
}

// MaxDescriptorEntries bounds the entries of one RLS descriptor: a
// composite's kind is its keys joined by "." and a kind is at most 64 bytes
// (event.MaxNameLen), so 16 keys of three letters are already the longest
// kind any rule can name. Past it the descriptor is refused unread.
const MaxDescriptorEntries = 16

// rlsRequest is an RLS call as the limiter's Request, read within bounds
// before anything is decided: the domain is the action, the first
// maxDescriptors descriptors give a subject each (rlsSubject; one without
// entries gives none, each as set counts it), and the count is rlsHitsAddend's of those. Envoy
// sends a descriptor per rate_limit action set, a handful; descriptors past
// the bound are not read, and bad refuses the call (unless a subject read
// is denied, Limiter.refuse), as it does a descriptor of more than
// MaxDescriptorEntries entries. owner[k] is the descriptor of subject k,
// appended to owners.
func rlsRequest(in *rlsv3.RateLimitRequest, set *rules.Set, maxDescriptors int, owners []int) (req Request, owner []int, checkOnly bool, bad error) {
	descs := in.GetDescriptors()
	if len(descs) > maxDescriptors {
		bad = invalidf("%d descriptors, at most %d (the first %d were decided)", len(descs), maxDescriptors, maxDescriptors)
		descs = descs[:maxDescriptors]
	}
	req.N, checkOnly = rlsHitsAddend(in.GetHitsAddend(), descs)
	req.Action = in.GetDomain()
	owner = owners[:0]
	for i, desc := range descs {
		switch n := len(desc.GetEntries()); {
		case n == 0:
			continue
		case n > MaxDescriptorEntries:
			if bad == nil {
				bad = invalidf("descriptor %d: %d entries, at most %d", i, n, MaxDescriptorEntries)
			}
			continue
		}
		req.Subjects = append(req.Subjects, rlsSubject(set, desc))
		owner = append(owner, i)
	}
	return req, owner, checkOnly, bad
}

// rlsIndex finds each descriptor's subject among a decision's limits
// without a nested scan: a descriptor has one subject (owner, ascending,
// finds it by binary search), and assemble appends a subject's limits
// together, so each subject's are one run of d.Limits, found in a map. A
// call of one subject (Envoy's usual) needs neither: all limits are its;
// one of a few scans the limits instead of allocating a map.
type rlsIndex struct {
	n      int // descriptors answered
	subs   []Subject
	owner  []int
	set    *rules.Set
	limits []Limit
	runs   map[Subject][2]int // subject -> d.Limits[lo:hi]; nil for up to rlsScanSubjects
}

// rlsScanSubjects is the most subjects whose limits are found by a scan:
// at most rlsScanSubjects times the limits, less than a map costs.
const rlsScanSubjects = 4

// newRLSIndex indexes d for n descriptors whose subjects are subs (owner:
// subject -> descriptor). A descriptor's subject is named as the decision
// names it: canonical for set (an IPv6 address of kind ip: its prefix).
func newRLSIndex(d Decision, subs []Subject, owner []int, n int, set *rules.Set) rlsIndex {
	ix := rlsIndex{n: n, subs: subs, owner: owner, set: set, limits: d.Limits}
	if len(owner) <= rlsScanSubjects {
		return ix
	}
	ix.runs = make(map[Subject][2]int, len(owner))
	for i := 0; i < len(d.Limits); {
		l := &d.Limits[i]
		s := Subject{Kind: l.Kind, Subject: l.Subject}
		j := i + 1
		for j < len(d.Limits) && d.Limits[j].Kind == s.Kind && d.Limits[j].Subject == s.Subject {
			j++
		}
		if _, seen := ix.runs[s]; !seen {
			ix.runs[s] = [2]int{i, j}
		}
		i = j
	}
	return ix
}

func (ix *rlsIndex) descriptors() int { return ix.n }

// subject is descriptor i's subject as decided; false for none.
func (ix *rlsIndex) subject(i int) (Subject, bool) {
	k, ok := slices.BinarySearch(ix.owner, i)
	if !ok {
		return Subject{}, false
	}
	s := ix.subs[k]
	if ix.set != nil {
		s.Subject = ix.set.Subject(s.Kind, s.Subject)
	}
	return s, true
}

// run is the run of d.Limits of subject s.
func (ix *rlsIndex) run(s Subject) (lo, hi int) {
	switch {
	case ix.runs != nil:
		r := ix.runs[s]
		return r[0], r[1]
	case len(ix.owner) <= 1:
		return 0, len(ix.limits)
	}
	for lo < len(ix.limits) && (ix.limits[lo].Kind != s.Kind || ix.limits[lo].Subject != s.Subject) {
		lo++
	}
	for hi = lo; hi < len(ix.limits) && ix.limits[hi].Kind == s.Kind && ix.limits[hi].Subject == s.Subject; hi++ {
	}
	return lo, hi
}

// status is descriptor i's answer: OVER_LIMIT with the denying limit when
// its subject is denied, otherwise OK with its enforced limit that has the
// least quota left.
func (ix *rlsIndex) status(d Decision, i int) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	sub, ok := ix.subject(i)
	if den := d.Denial; den != nil && (den.Kind == "" || ok && den.Kind == sub.Kind && den.Subject == sub.Subject) {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		st.DurationUntilReset = durationpb.New(roundUp(den.RetryAfter))
		if den.Rule != "" {
			st.CurrentLimit = rlsLimitOf(den.Rule, den.Kind, den.Limit, den.Window, den.Rate)
		}
		return st
	}
	if !ok {
		return st
	}
	var best *Limit
	lo, hi := ix.run(sub)
	for k := lo; k < hi; k++ {
		l := &d.Limits[k]
		if l.Shadow || l.Allowlisted {
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
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
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
