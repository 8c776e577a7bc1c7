package limitergrpc_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
	"github.com/floodgate-dev/floodgate/limiter/limitergrpc"
	"github.com/floodgate-dev/floodgate/limiter/limitermw"
)

// limiterStub denies the subjects it is told to, and remembers what it was
// asked; err, when set, is its only answer.
type limiterStub struct {
	mu     sync.Mutex
	deny   map[string]bool
	err    error
	asked  []limitapi.Request
	events []event.Event
}

func (l *limiterStub) Check(_ context.Context, req limitapi.Request) (limitapi.Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked = append(l.asked, req)
	if l.err != nil {
		return limitapi.Decision{}, l.err
	}
	for _, s := range req.Subjects {
		if l.deny[s.Subject] {
			return limitapi.Decision{Denial: &limitapi.Denial{Rule: "login", Kind: s.Kind, Subject: s.Subject, Limit: 5,
				Window: time.Minute, RetryAfter: 42 * time.Second, Message: "Too many logins."}}, nil
		}
	}
	return limitapi.Decision{Allowed: true}, nil
}

func (l *limiterStub) Publish(_ context.Context, evs ...event.Event) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, evs...)
	return nil
}

// serve runs a gRPC health server behind the interceptor on loopback and
// returns a client of it.
func serve(t *testing.T, cfg limitergrpc.Config) healthpb.HealthClient {
	t.Helper()
	unary, err := limitergrpc.UnaryServerInterceptor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(unary))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

const check = "/grpc.health.v1.Health/Check"

func TestInterceptorDeniesWithTheRetryTime(t *testing.T) {
	lim := &limiterStub{deny: map[string]bool{"198.51.100.7": true}}
	proxies, err := limitermw.ParseProxies("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, limitergrpc.Config{Checker: lim, Publisher: lim, TrustedProxies: proxies,
		Action: func(m string) string {
			if m == check {
				return "login"
			}
			return ""
		}})

	// A client the proxy names as allowed goes through, and its event is
	// published after the handler.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", "203.0.113.9")
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("an allowed client: %v", err)
	}
	// One the limiter denies gets ResourceExhausted, the message, the
	// retry time, and the RateLimit fields; the handler never runs, nothing
	// is published.
	var header metadata.MD
	ctx = metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", "6.6.6.6, 198.51.100.7")
	_, err = c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || st.Message() != "Too many logins." {
		t.Fatalf("a denied client: %v, want ResourceExhausted with the rule's message", err)
	}
	var retry time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri.GetRetryDelay().AsDuration()
		}
	}
	if retry != 42*time.Second || len(header.Get("retry-after")) != 1 || header.Get("retry-after")[0] != "42" || len(header.Get("ratelimit")) != 1 {
		t.Fatalf("a denial: retry %s, header %v; want RetryInfo 42s and retry-after, ratelimit", retry, header)
	}
	if len(lim.asked) != 2 || lim.asked[0].Subjects[0].Subject != "203.0.113.9" || lim.asked[1].Subjects[0].Subject != "198.51.100.7" {
		t.Fatalf("asked %v, want the clients the trusted proxy named", lim.asked)
	}
	if len(lim.events) != 1 || lim.events[0].Action != "login" || lim.events[0].Subject != "203.0.113.9" {
		t.Fatalf("published %v, want one login event of the allowed client", lim.events)
	}
	// A method without an action is not limited: the denied client may
	// call it, and the limiter is not asked.
	if _, err := c.List(ctx, &healthpb.HealthListRequest{}); err != nil || len(lim.asked) != 2 {
		t.Fatalf("a method without an action: %v, %d asked; want it served unasked", err, len(lim.asked))
	}
}

func TestInterceptorFailureModes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		failClosed bool
		want       codes.Code
	}{
		{"limiter down, open", errors.New("connection refused"), false, codes.OK},
		{"limiter down, closed", errors.New("connection refused"), true, codes.Unavailable},
		{"refused, even open", limitapi.ErrRefused, false, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := &limiterStub{err: tc.err}
			c := serve(t, limitergrpc.Config{Checker: lim, FailClosed: tc.failClosed, Action: func(string) string { return "login" }})
			if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != tc.want {
				t.Fatalf("%v, want %s", err, tc.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	lim := &limiterStub{}
	for _, cfg := range []limitergrpc.Config{
		{Action: func(string) string { return "x" }},
		{Checker: lim},
		{Checker: lim, Action: func(string) string { return "x" }, Take: true},
	} {
		if _, err := limitergrpc.UnaryServerInterceptor(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
