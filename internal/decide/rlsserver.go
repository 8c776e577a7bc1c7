package decide

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// Defaults of the RLS connection lifetime (ServerConfig).
const (
	// DefaultRLSMaxConnectionAge: Envoy keeps one HTTP/2 connection per
	// upstream host for as long as it lives, so without an age limit the
	// limiters started last (a scale-out, a rolling update) get no calls
	// until Envoy restarts. Five minutes rebalances a fleet within minutes
	// and costs one reconnection per Envoy worker and replica per period.
	DefaultRLSMaxConnectionAge = 5 * time.Minute
	// DefaultRLSMaxConnectionAgeGrace is how long calls in flight on a
	// connection past its age may finish after the GOAWAY: far longer than
	// any call (a call's Redis budget is --redis-timeout).
	DefaultRLSMaxConnectionAgeGrace = 30 * time.Second
	// rlsHealthTimeout bounds the readiness check behind one health
	// Check (a Redis round trip when the limiter has no State).
	rlsHealthTimeout = time.Second
)

// rlsServiceName is the RLS service's name in the gRPC health service.
var rlsServiceName = rlsv3.RateLimitService_ServiceDesc.ServiceName

// rlsKeepalive is the server option that ages RLS connections out; nil
// when age is negative (connections live forever).
func rlsKeepalive(age, grace time.Duration) []grpc.ServerOption {
	if age < 0 {
		return nil
	}
	return []grpc.ServerOption{grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: age, MaxConnectionAgeGrace: grace,
	})}
}

// healthExempt lets the gRPC health service through an auth interceptor,
// as /healthz and /readyz are on the HTTP port: a load balancer's or
// Envoy's health checker holds no token.
func healthExempt(next grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	prefix := "/" + healthpb.Health_ServiceDesc.ServiceName + "/"
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if strings.HasPrefix(info.FullMethod, prefix) {
			return h(ctx, req)
		}
		return next(ctx, req, info, h)
	}
}

// rlsHealth is the gRPC health service of the RLS port, for the whole
// server ("") and the RLS service: SERVING while the limiter is ready (as
// /readyz answers, asked at each Check, so never stale), NOT_SERVING
// otherwise and from the moment shutdown begins. Envoy's gRPC health check
// of the RLS cluster then sends no calls to a limiter that has not loaded
// its state yet, nor to one that is draining. Watch is not served
// (Unimplemented): a gRPC client's own health checking then counts the
// server as up, and Envoy and Kubernetes use Check.
type rlsHealth struct {
	healthpb.UnimplementedHealthServer
	l        *Limiter
	stopping atomic.Bool
}

var _ healthpb.HealthServer = (*rlsHealth)(nil)

func (h *rlsHealth) Check(ctx context.Context, in *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if svc := in.GetService(); svc != "" && svc != rlsServiceName {
		return nil, status.Errorf(codes.NotFound, "unknown service %q", truncateName(svc))
	}
	st := healthpb.HealthCheckResponse_SERVING
	if h.stopping.Load() {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	} else {
		ctx, cancel := context.WithTimeout(ctx, rlsHealthTimeout)
		defer cancel()
		if err := h.l.Ready(ctx); err != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// truncateName bounds a caller's service name in an error.
func truncateName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// rlsOKHeaders are the RateLimit fields of an allowed decision (the
// enforced limits, their remaining quota and reset), which Envoy adds to
// the upstream's response as /v1/check and limitermw do on every allowed
// answer; nil when no limit applies.
func rlsOKHeaders(d Decision) []*corev3.HeaderValue {
	pol, cur, _ := limitapi.Fields(d)
	if pol == "" {
		return nil
	}
	return []*corev3.HeaderValue{
		{Key: limitapi.HeaderRateLimitPolicy, Value: pol},
		{Key: limitapi.HeaderRateLimit, Value: cur},
	}
}

// rlsHitsAddend is a call's count, of the request's hits_addend and its
// descriptors'. A descriptor's hits_addend overrides the request's
// (Envoy's rule; the request's 0 means 1), and floodgate decides all
// subjects of a call together, with one count: the largest any descriptor
// asks for. A count of 0 (only descriptors can give it, all of them) asks
// for a check: nothing is counted, even in take mode.
func rlsHitsAddend(hitsAddend uint32, descs []*commonv3.RateLimitDescriptor) (n int64, checkOnly bool) {
	count := max(uint64(hitsAddend), 1)
	for i, d := range descs {
		c := max(uint64(hitsAddend), 1)
		if h := d.GetHitsAddend(); h != nil {
			c = h.GetValue()
		}
		// A call's descriptors are decided together, with one count: the
		// largest asked. An error instead would be an allow under Envoy's
		// default failure_mode_deny: false.
		if i == 0 || c > count {
			count = c
		}
	}
	if count == 0 {
		return 1, true
	}
	// Past event.MaxN the limiter refuses n itself, denying when a subject
	// is over a limit (Limiter.Check); clamped so the conversion cannot wrap.
	return int64(min(count, uint64(event.MaxN)+1)), false
}

// rlsSubject is a descriptor's subject: with one entry, its key is the kind
// and its value the subject; with several (an Envoy rate_limit whose
// actions give ip and path), they are one subject together,
// limitapi.Composite: kind "ip.path", subject "<ip>|<path>".
//
// The subject is the one the limiter decides: as set counts it
// (rules.Set.Subject: an e-mail normalized before any digest, so
// "victim@x	" is victim@x), then its digest when it is no valid subject
// (event.CanonicalSubject). A denial of another spelling, or of an
// overlong value's digest, then finds its descriptor. A single entry's
// empty value (an empty header) is an empty subject, which the limiter
// leaves out as every surface does; a composite of an empty value
// ("203.0.113.7|") is a subject like any other.
func rlsSubject(set *rules.Set, d *commonv3.RateLimitDescriptor) Subject {
	es := d.GetEntries()
	if len(es) == 1 {
		kind := es[0].GetKey()
		return Subject{Kind: kind, Subject: event.CanonicalSubject(set.Subject(kind, es[0].GetValue()))}
	}
	kinds, values := make([]string, len(es)), make([]string, len(es))
	for i, e := range es {
		kinds[i], values[i] = e.GetKey(), e.GetValue()
	}
	kind, subject := limitapi.Composite(kinds, values)
	return Subject{Kind: kind, Subject: event.CanonicalSubject(set.Subject(kind, subject))}
}
