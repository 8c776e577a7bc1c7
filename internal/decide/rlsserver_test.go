package decide_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/rules"
)

// healthServer starts a limiter without a State (ready once it has rules
// and Redis answers) whose rules tests set, served on loopback with
// server options opt.
func healthServer(t *testing.T, opt func(*decide.ServerConfig)) (*decide.Server, *atomic.Pointer[rules.Set]) {
	t.Helper()
	var set atomic.Pointer[rules.Set]
	lim, err := decide.New(decide.Config{Store: testStore(t, liveRedis(t)), Rules: set.Load, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	scfg := decide.ServerConfig{Limiter: lim, HTTPAddr: "127.0.0.1:0", RLSAddr: "127.0.0.1:0"}
	if opt != nil {
		opt(&scfg)
	}
	srv, err := decide.NewServer(scfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return srv, &set
}

func grpcConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestRLSHealth: the gRPC health service on the RLS port answers
// readiness (NOT_SERVING until rules are loaded, then SERVING), for the
// whole server and for the RLS service, NotFound for other services, and
// needs no bearer token.
func TestRLSHealth(t *testing.T) {
	srv, set := healthServer(t, func(c *decide.ServerConfig) { c.AuthToken = "s3cret" })
	conn := grpcConn(t, srv.RLSAddr())
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	services := []string{"", rlsv3.RateLimitService_ServiceDesc.ServiceName}
	statusOf := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("health check %q: %v", service, err)
		}
		return resp.GetStatus()
	}
	for _, svc := range services {
		if st := statusOf(svc); st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("service %q without rules: %v, want NOT_SERVING", svc, st)
		}
	}
	set.Store(mustRules(t, testRules))
	for _, svc := range services {
		waitFor(t, "service "+svc+" SERVING", func() bool { return statusOf(svc) == healthpb.HealthCheckResponse_SERVING })
	}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown service: %v, want NotFound", err)
	}
	// The RLS itself still wants the token.
	_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "visit",
		Descriptors: nil})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("rls without token: %v, want Unauthenticated", err)
	}
}

// TestRLSMaxConnectionAge: the server ends a connection past its age
// (GOAWAY), so a client's connection leaves READY without the client
// doing anything; it reconnects on its next call.
func TestRLSMaxConnectionAge(t *testing.T) {
	srv, set := healthServer(t, func(c *decide.ServerConfig) {
		c.RLSMaxConnectionAge = 100 * time.Millisecond
		c.RLSMaxConnectionAgeGrace = 100 * time.Millisecond
	})
	set.Store(mustRules(t, testRules))
	conn := grpcConn(t, srv.RLSAddr())
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the aged connection to be closed", func() bool {
		st := conn.GetState()
		if st == connectivity.Ready {
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			conn.WaitForStateChange(wctx, st)
			st = conn.GetState()
		}
		return st != connectivity.Ready
	})
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("check after the connection aged out: %v", err)
	}
}

func TestServerConfigValidateGrace(t *testing.T) {
	cfg := decide.ServerConfig{Limiter: &decide.Limiter{}, RLSMaxConnectionAgeGrace: -time.Second}
	if err := cfg.Validate(); err == nil {
		t.Fatal("negative grace accepted")
	}
}

// TestRLSOKHeaders: an OK answer carries the RateLimit fields of the
// enforced limits (Envoy adds them to the allowed response; r is a lower
// bound from memory, docs/limiter.md "Remaining quota"), no
// Retry-After; RLSNoOKHeaders leaves them out; a domain without rules gets
// none.
func TestRLSOKHeaders(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "off"}[off], func(t *testing.T) {
			e := newEnv(t, func(_ *decide.Config, s *decide.ServerConfig) { s.RLSNoOKHeaders = off })
			rls := rlsClient(t, e.srv.RLSAddr())
			ctx := context.Background()
			rr, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "login_failed",
				Descriptors: []*commonv3.RateLimitDescriptor{descriptor("ip", "203.0.113.77")}})
			if err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("RLS: %v %v", rr, err)
			}
			rh := map[string]string{}
			for _, h := range rr.ResponseHeadersToAdd {
				rh[h.Key] = h.Value
			}
			if off {
				if len(rh) != 0 {
					t.Errorf("headers %v with OK headers off", rh)
				}
				return
			}
			if len(rh) != 2 || !strings.HasPrefix(rh["RateLimit-Policy"], `"login-failed/ip/1m";q=5;w=60`) ||
				!strings.HasPrefix(rh["RateLimit"], `"login-failed/ip/1m";r=`) || strings.HasPrefix(rh["RateLimit"], `"login-failed/ip/1m";r=0;`) {
				t.Errorf("OK answer headers %v", rh)
			}
			rr, err = rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "nothing_here",
				Descriptors: []*commonv3.RateLimitDescriptor{descriptor("ip", "203.0.113.77")}})
			if err != nil || len(rr.ResponseHeadersToAdd) != 0 {
				t.Errorf("no rules: %v %v, want no headers", rr, err)
			}
		})
	}
}

// TestRLSDescriptorHitsAddend: in take mode a descriptor's hits_addend is
// the count (over the limit: InvalidArgument, as the request's), and 0
// checks without counting.
func TestRLSDescriptorHitsAddend(t *testing.T) {
	e := newEnv(t, func(_ *decide.Config, s *decide.ServerConfig) { s.RLSMode = decide.RLSTake })
	rls := rlsClient(t, e.srv.RLSAddr())
	ctx := context.Background()
	call := func(h uint64) (*rlsv3.RateLimitResponse, error) {
		d := descriptor("email", "hits@example.com")
		d.HitsAddend = wrapperspb.UInt64(h)
		return rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "password_reset", HitsAddend: 1,
			Descriptors: []*commonv3.RateLimitDescriptor{d}})
	}
	if _, err := call(11); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("descriptor hits_addend 11 of 10/1m: %v, want InvalidArgument", err)
	}
	for i := range 12 {
		if rr, err := call(0); err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("check-only call %d: %v %v", i, rr, err)
		}
	}
	// Nothing was counted: the whole limit is still there, and then spent.
	if rr, err := call(10); err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("take 10 after check-only calls: %v %v", rr, err)
	}
	if rr, err := call(1); err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("take 1 more: %v %v, want OVER_LIMIT", rr, err)
	}
}

// TestRLSCompositeDescriptor: a descriptor with several entries is one
// subject (kind "ip.path", subject "<ip>|<path>"), limited by a rule of
// that kind; another path is another subject.
func TestRLSCompositeDescriptor(t *testing.T) {
	set := mustRules(t, `
rules:
  - name: ip-path
    action: visit
    kinds: [ip.path]
    limits: [3/1m]
    strict: true
`)
	e := newEnv(t, func(c *decide.Config, s *decide.ServerConfig) {
		c.Rules = func() *rules.Set { return set }
		s.RLSMode = decide.RLSTake
	})
	rls := rlsClient(t, e.srv.RLSAddr())
	ctx := context.Background()
	call := func(path string) *rlsv3.RateLimitResponse {
		t.Helper()
		rr, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "visit",
			Descriptors: []*commonv3.RateLimitDescriptor{descriptor("ip", "198.51.100.4", "path", path)}})
		if err != nil {
			t.Fatal(err)
		}
		return rr
	}
	for i := range 3 {
		if rr := call("/login"); rr.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d: %v", i+1, rr)
		}
	}
	rr := call("/login")
	if rr.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || rr.Statuses[0].GetCurrentLimit().GetName() != "ip-path/ip.path/1m" {
		t.Fatalf("4th call: %v, want OVER_LIMIT by ip-path/ip.path/1m", rr)
	}
	if rr := call("/other"); rr.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("another path: %v, want OK", rr)
	}
	d, err := e.lim.Check(ctx, decide.Request{Action: "visit", Subjects: []decide.Subject{{Kind: "ip.path", Subject: "198.51.100.4|/login"}}, Exact: true})
	if err != nil || d.Allowed {
		t.Errorf("check of the composite subject by its documented name: %+v %v, want denied", d, err)
	}
}
