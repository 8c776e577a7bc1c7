// Package limitergrpc puts a floodgate limiter in front of a gRPC server's
// methods, as limitermw does for net/http handlers: the limiter is asked
// before the handler (ResourceExhausted with the retry time when denied),
// and the access event is published after it.
//
//	lc, _ := limiterclient.New(limiterclient.Config{BaseURL: "http://127.0.0.1:8080"})
//	unary, err := limitergrpc.UnaryServerInterceptor(limitergrpc.Config{
//		Checker: lc,
//		Action: func(method string) string {
//			if method == "/shop.v1.Accounts/Login" {
//				return "login"
//			}
//			return "" // not limited
//		},
//	})
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary))
//
// A denial is status ResourceExhausted carrying the rule's message, an
// errdetails.RetryInfo with the retry time, and the RateLimit-Policy,
// RateLimit and Retry-After fields as response header metadata.
//
// Public: what a Go gRPC service embeds; it links limitapi, limitermw's
// client-address rules and gRPC, and no client of its own (a
// limiterclient.Client or any Checker does).
package limitergrpc

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
	"github.com/floodgate-dev/floodgate/limiter/limitermw"
)

// Checker decides; *limiterclient.Client implements it.
type Checker interface {
	Check(ctx context.Context, req limitapi.Request) (limitapi.Decision, error)
}

// Taker checks and counts in one step (strict rules) and publishes the
// events of what it admits; *limiterclient.Client implements it.
type Taker interface {
	Take(ctx context.Context, req limitapi.Request) (limitapi.Decision, error)
}

// Publisher publishes access events; *producer.Publisher implements it.
type Publisher interface {
	Publish(ctx context.Context, events ...event.Event) error
}

// Config configures the interceptors.
type Config struct {
	// Checker is asked before the handler. Required; with Take it must
	// implement Taker too.
	Checker Checker
	// Take calls Taker.Take instead of Check: the limiter counts and
	// publishes what it admits. Default false.
	Take bool
	// Action names the action of a method ("/pkg.Service/Method"); ""
	// leaves the method unlimited. Required.
	Action func(fullMethod string) string
	// Subjects returns a call's features. Default: the client's IP (kind
	// "ip"), the peer's address as TrustedProxies resolve it with the
	// x-forwarded-for metadata. Empty subjects are dropped.
	Subjects func(ctx context.Context, fullMethod string, req any) []limitapi.Subject
	// TrustedProxies may name the client in x-forwarded-for (an Envoy in
	// front). Default none: the peer is the client.
	TrustedProxies limitermw.Proxies
	// Publisher receives the access events after the handler (unary calls:
	// when the call ends; streams: when the stream does). Nil: nothing is
	// published. Must be nil with Take.
	Publisher Publisher
	// Publish says whether a handled call is an event of its action, given
	// the handler's error. Default: every call.
	Publish func(fullMethod string, err error) bool
	// FailClosed answers Unavailable when the limiter cannot be reached.
	// Default false: the call goes through. A request the limiter refuses
	// (limitapi.ErrRefused) is InvalidArgument whatever it says.
	FailClosed bool
	// Now is the clock of published events. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.Checker == nil:
		return errors.New("limitergrpc: nil checker")
	case c.Action == nil:
		return errors.New("limitergrpc: no action")
	case c.Take && c.Publisher != nil:
		return errors.New("limitergrpc: Take publishes through the limiter; a Publisher would publish every event twice")
	}
	if _, ok := c.Checker.(Taker); c.Take && !ok {
		return errors.New("limitergrpc: Take needs a checker that implements Taker")
	}
	return nil
}

type interceptor struct{ cfg Config }

func newInterceptor(cfg Config) (*interceptor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Subjects == nil {
		proxies := cfg.TrustedProxies
		cfg.Subjects = func(ctx context.Context, _ string, _ any) []limitapi.Subject {
			return []limitapi.Subject{{Kind: "ip", Subject: ClientIP(ctx, proxies)}}
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &interceptor{cfg: cfg}, nil
}

// UnaryServerInterceptor returns the interceptor of unary methods.
func UnaryServerInterceptor(cfg Config) (grpc.UnaryServerInterceptor, error) {
	in, err := newInterceptor(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		action, subs, err := in.admit(ctx, info.FullMethod, req)
		if err != nil {
			return nil, err
		}
		resp, herr := handler(ctx, req)
		in.publish(ctx, info.FullMethod, action, subs, herr)
		return resp, herr
	}, nil
}

// StreamServerInterceptor returns the interceptor of streaming methods:
// the limiter is asked when the stream opens (Subjects sees no request
// message: nil), and the event published when it ends.
func StreamServerInterceptor(cfg Config) (grpc.StreamServerInterceptor, error) {
	in, err := newInterceptor(cfg)
	if err != nil {
		return nil, err
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		action, subs, err := in.admit(ss.Context(), info.FullMethod, nil)
		if err != nil {
			return err
		}
		herr := handler(srv, ss)
		in.publish(ss.Context(), info.FullMethod, action, subs, herr)
		return herr
	}, nil
}

// admit asks the limiter about a call; a non-nil error is the call's
// answer. An action of "" is not limited.
func (in *interceptor) admit(ctx context.Context, method string, req any) (string, []limitapi.Subject, error) {
	action := in.cfg.Action(method)
	if action == "" {
		return "", nil, nil
	}
	var subs []limitapi.Subject
	for _, s := range in.cfg.Subjects(ctx, method, req) {
		if s.Subject != "" {
			subs = append(subs, s)
		}
	}
	if len(subs) == 0 {
		return action, nil, nil
	}
	lreq := limitapi.Request{Action: action, Subjects: subs}
	var d limitapi.Decision
	var err error
	if in.cfg.Take {
		d, err = in.cfg.Checker.(Taker).Take(ctx, lreq)
	} else {
		d, err = in.cfg.Checker.Check(ctx, lreq)
	}
	switch {
	case errors.Is(err, limitapi.ErrRefused):
		// Letting a refused request through would let through whoever
		// makes requests invalid.
		in.cfg.Logger.Warn("limitergrpc: limiter refused the request", "method", method, "action", action, "err", err)
		return action, nil, status.Error(codes.InvalidArgument, "request refused by the rate limiter")
	case err != nil && in.cfg.FailClosed:
		in.cfg.Logger.Warn("limitergrpc: limiter failed, refusing", "method", method, "action", action, "err", err)
		return action, nil, status.Error(codes.Unavailable, "rate limiter unavailable")
	case err != nil:
		in.cfg.Logger.Warn("limitergrpc: limiter failed, letting the call through", "method", method, "action", action, "err", err)
		return action, subs, nil
	case !d.Allowed:
		return action, nil, in.denied(ctx, d)
	}
	return action, subs, nil
}

// denied is a denial as gRPC says it: ResourceExhausted with the message,
// the retry time as RetryInfo, and the RateLimit fields as header
// metadata.
func (in *interceptor) denied(ctx context.Context, d limitapi.Decision) error {
	pol, cur, retry := limitapi.Fields(d)
	md := metadata.MD{}
	for k, v := range map[string]string{"ratelimit-policy": pol, "ratelimit": cur, "retry-after": retry} {
		if v != "" {
			md.Set(k, v)
		}
	}
	if err := grpc.SetHeader(ctx, md); err != nil {
		// Sent already (a stream that wrote): the status still carries
		// the retry time.
		in.cfg.Logger.Debug("limitergrpc: denial's header fields not set", "err", err)
	}
	msg := "rate limited"
	if d.Denial != nil && d.Denial.Message != "" {
		msg = d.Denial.Message
	}
	st := status.New(codes.ResourceExhausted, msg)
	if ds, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter())}); err == nil {
		st = ds
	}
	return st.Err()
}

func (in *interceptor) publish(ctx context.Context, method, action string, subs []limitapi.Subject, herr error) {
	if in.cfg.Publisher == nil || len(subs) == 0 || (in.cfg.Publish != nil && !in.cfg.Publish(method, herr)) {
		return
	}
	evs := limitermw.Events(action, in.cfg.Now(), subs)
	if err := in.cfg.Publisher.Publish(context.WithoutCancel(ctx), evs...); err != nil {
		in.cfg.Logger.Error("limitergrpc: publish access event", "method", method, "action", action, "err", err)
	}
}

// ClientIP is a call's client address: the peer's, or, when the peer is
// one of proxies, the nearest x-forwarded-for hop none of them is
// (limitermw.Proxies.Resolve).
func ClientIP(ctx context.Context, proxies limitermw.Proxies) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	host := p.Addr.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return proxies.Resolve(strings.TrimSpace(host), md.Get("x-forwarded-for")...)
}
