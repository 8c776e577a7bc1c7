package decide

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"google.golang.org/grpc/credentials"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1/floodgatev1connect"
)

// Defaults of ServerConfig.
const (
	DefaultHTTPAddr        = "127.0.0.1:8080"
	DefaultRLSAddr         = "127.0.0.1:8081"
	DefaultMaxRequestBytes = 64 << 10
	// DefaultMaxConcurrentStreams bounds the calls in flight on one HTTP/2
	// connection, RLS and Connect/gRPC alike (gRPC's own default is no
	// bound): each holds a goroutine and up to MaxRequestBytes. 250 is what
	// Go's HTTP/2 server sets, which the Connect port had already. An
	// answer from memory takes well under a millisecond, so 250 in flight on
	// one connection carry far more calls a second than one Envoy worker
	// sends; past the bound a client waits (grpc-go) or opens another
	// connection (Envoy).
	DefaultMaxConcurrentStreams = 250
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Limiter decides. Required.
	Limiter *Limiter
	// HTTPAddr serves Connect (gRPC, gRPC-Web, HTTP/JSON; HTTP/2 without
	// TLS), /v1/check, /v1/take, /healthz, /readyz and /metrics. Default
	// 127.0.0.1:8080; port 0 picks a free port.
	HTTPAddr string
	// RLSAddr serves Envoy's RateLimitService over gRPC. Default
	// 127.0.0.1:8081; "off" disables it.
	RLSAddr string
	// RLSMode: RLSCheck (default) or RLSTake.
	RLSMode RLSMode
	// AuthToken, when set, is required as "Authorization: Bearer <token>"
	// on Connect, /v1/* and RLS calls (not on health checks, nor on
	// /metrics unless MetricsAuth).
	AuthToken string
	// MetricsAuth requires AuthToken on /metrics too: the metrics name
	// rules, and a scraper can send a bearer token (Prometheus's
	// authorization.credentials). Needs AuthToken.
	MetricsAuth bool
	// MaxRequestBytes bounds request bodies and RPC messages. Default 64 KiB.
	MaxRequestBytes int64
	// MaxConcurrentStreams bounds the calls in flight on one HTTP/2
	// connection of either listener (SETTINGS_MAX_CONCURRENT_STREAMS).
	// Default 250.
	MaxConcurrentStreams uint32
	// TLS, when set, serves both listeners over TLS (HTTP/2 by ALPN on
	// the HTTP one, as gRPC clients need); it asks for client certificates
	// when mTLS is wanted. Nil: plaintext (h2c).
	TLS *tls.Config
	// Gatherer serves /metrics. Nil: no /metrics.
	Gatherer prometheus.Gatherer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// RLSMaxConnectionAge closes RLS connections this old (GOAWAY; the
	// client reconnects), so that Envoy's long-lived connections spread
	// over new replicas. Default 5m; negative: never.
	RLSMaxConnectionAge time.Duration
	// RLSMaxConnectionAgeGrace is how long calls in flight on an aged
	// connection may finish. Default 30s.
	RLSMaxConnectionAgeGrace time.Duration
	// RLSNoOKHeaders leaves the RateLimit header fields out of OK RLS
	// answers (they are on OVER_LIMIT answers always). Default false:
	// Envoy adds them to every allowed response, as /v1/check does.
	RLSNoOKHeaders bool
}

// Validate reports the first problem with c.
func (c *ServerConfig) Validate() error {
	switch {
	case c.Limiter == nil:
		return errors.New("limiter server: nil limiter")
	case c.MaxRequestBytes < 0:
		return fmt.Errorf("limiter server: max request bytes %d is negative", c.MaxRequestBytes)
	case c.RLSMode != RLSCheck && c.RLSMode != RLSTake:
		return fmt.Errorf("limiter server: unknown rls mode %d", c.RLSMode)
	case c.MetricsAuth && c.AuthToken == "":
		return errors.New("limiter server: metrics auth needs an auth token")
	}
	for _, a := range []string{c.HTTPAddr, c.RLSAddr} {
		if a == "" || a == "off" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("limiter server: address %q: %w", a, err)
		}
	}
	if c.RLSMaxConnectionAgeGrace < 0 {
		return fmt.Errorf("limiter server: rls max connection age grace %s is negative", c.RLSMaxConnectionAgeGrace)
	}
	return nil
}

// Server serves a Limiter's three surfaces.
type Server struct {
	cfg     ServerConfig
	log     *slog.Logger
	handler http.Handler
	httpSrv *http.Server
	grpcSrv *grpc.Server
	health  *rlsHealth
	httpLn  net.Listener
	rlsLn   net.Listener
	wg      sync.WaitGroup
	errs    chan error
}

// NewServer validates cfg and builds the handlers; Start listens.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = DefaultHTTPAddr
	}
	if cfg.RLSAddr == "" {
		cfg.RLSAddr = DefaultRLSAddr
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if cfg.RLSMaxConnectionAge == 0 {
		cfg.RLSMaxConnectionAge = DefaultRLSMaxConnectionAge
	}
	if cfg.RLSMaxConnectionAgeGrace == 0 {
		cfg.RLSMaxConnectionAgeGrace = DefaultRLSMaxConnectionAgeGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Logger, errs: make(chan error, 2)}
	l := cfg.Limiter

	opts := []connect.HandlerOption{connect.WithReadMaxBytes(int(cfg.MaxRequestBytes)), connect.WithCodec(lenientCodec{})}
	if cfg.AuthToken != "" {
		opts = append(opts, connect.WithInterceptors(authInterceptor(cfg.AuthToken, l.m)))
	}
	path, rpc := floodgatev1connect.NewLimiterHandler(&connectService{l: l}, opts...)
	mux := http.NewServeMux()
	mux.Handle(path, rpc)
	mux.Handle("/v1/check", bearerAuth(cfg.AuthToken, l.m, &httpHandler{l: l, maxBytes: cfg.MaxRequestBytes}))
	mux.Handle("/v1/take", bearerAuth(cfg.AuthToken, l.m, &httpHandler{l: l, take: true, maxBytes: cfg.MaxRequestBytes}))
	mux.HandleFunc("/healthz", healthz)
	mux.Handle("/readyz", readyz(l))
	if cfg.Gatherer != nil {
		var h http.Handler = promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})
		if cfg.MetricsAuth {
			h = bearerAuth(cfg.AuthToken, l.m, h)
		}
		mux.Handle("/metrics", h)
	}
	s.handler = mux

	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // h2c: plain gRPC clients
	protocols.SetHTTP2(true)            // over TLS
	s.httpSrv = &http.Server{
		TLSConfig:         cfg.TLS,
		Handler:           mux,
		Protocols:         &protocols,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: int(cfg.MaxConcurrentStreams)},
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}

	if cfg.RLSAddr != "off" {
		gopts := RLSServerOptions(cfg.MaxRequestBytes, cfg.MaxConcurrentStreams)
		if cfg.TLS != nil {
			gopts = append(gopts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
		}
		gopts = append(gopts, rlsKeepalive(cfg.RLSMaxConnectionAge, cfg.RLSMaxConnectionAgeGrace)...)
		if cfg.AuthToken != "" {
			gopts = append(gopts, grpc.UnaryInterceptor(healthExempt(grpcAuth(cfg.AuthToken, l.m))))
		}
		s.grpcSrv = grpc.NewServer(gopts...)
		rlsv3.RegisterRateLimitServiceServer(s.grpcSrv, &rlsService{l: l, mode: cfg.RLSMode, noOKHeaders: cfg.RLSNoOKHeaders})
		// The gRPC health service on the RLS port: what Envoy's
		// grpc_health_check and Kubernetes' grpc probe ask.
		s.health = &rlsHealth{l: l}
		healthpb.RegisterHealthServer(s.grpcSrv, s.health)
	}
	return s, nil
}

// rlsWorkers is the RLS server's pool of stream workers. A call waits on
// Redis or the queue of strict takes while it holds its worker, and gRPC
// falls back to a goroutine of its own for a call that finds every worker
// busy: the pool is sized for the concurrency of a busy Envoy fleet, not
// for the cores. An idle worker costs its stack (some tens of KiB).
const rlsWorkers = 256

// RLSServerOptions are the gRPC options of the RLS server: the message
// size bound, the bound on calls in flight per connection (0:
// DefaultMaxConcurrentStreams), and a pool of stream workers. Without the pool gRPC starts a
// goroutine per call, and every one of them grows its stack again through
// the decision and publish path (copystack was 14 % of the limiter's CPU
// under strict takes); workers keep their grown stacks. bench/rlsload's
// no-op server takes the same options, so that the two differ by the work
// per call alone.
func RLSServerOptions(maxRequestBytes int64, maxConcurrentStreams uint32) []grpc.ServerOption {
	if maxConcurrentStreams == 0 {
		maxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(maxRequestBytes)),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.NumStreamWorkers(rlsWorkers),
		grpc.ForceServerCodec(lenientCodec{}), // invalid UTF-8 from Envoy is a subject, not an error
	}
}

// Handler returns the HTTP handler (Connect, /v1/*, health, metrics).
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on both addresses and serves in the background; errors of
// the serving goroutines are returned by Shutdown (and Err).
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen http %s: %w", s.cfg.HTTPAddr, err)
	}
	s.httpLn = ln
	if s.grpcSrv != nil {
		rln, err := net.Listen("tcp", s.cfg.RLSAddr)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("listen rls %s: %w", s.cfg.RLSAddr, err)
		}
		s.rlsLn = rln
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		serve := func() error { return s.httpSrv.Serve(s.httpLn) }
		if s.cfg.TLS != nil {
			serve = func() error { return s.httpSrv.ServeTLS(s.httpLn, "", "") }
		}
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.errs <- fmt.Errorf("serve http %s: %w", s.httpLn.Addr(), err)
		}
	}()
	if s.grpcSrv != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.grpcSrv.Serve(s.rlsLn); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				s.errs <- fmt.Errorf("serve rls %s: %w", s.rlsLn.Addr(), err)
			}
		}()
	}
	s.log.Info("limiter serving", "http", s.HTTPAddr(), "rls", s.RLSAddr(), "tls", s.cfg.TLS != nil)
	return nil
}

// Err yields an error when a listener fails while serving.
func (s *Server) Err() <-chan error { return s.errs }

// HTTPAddr returns the bound HTTP address (after Start).
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// RLSAddr returns the bound RLS address, "" when disabled or not started.
func (s *Server) RLSAddr() string {
	if s.rlsLn == nil {
		return ""
	}
	return s.rlsLn.Addr().String()
}

// Shutdown stops accepting, lets requests in flight finish until ctx ends,
// then closes whatever is left.
func (s *Server) Shutdown(ctx context.Context) error {
	var errs []error
	if s.health != nil {
		s.health.stopping.Store(true) // NOT_SERVING: health checkers stop sending calls
	}
	if s.grpcSrv != nil {
		done := make(chan struct{})
		go func() { s.grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpcSrv.Stop()
		}
	}
	if err := s.httpSrv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("shutdown http: %w", err))
		if cerr := s.httpSrv.Close(); cerr != nil {
			errs = append(errs, cerr)
		}
	}
	s.wg.Wait()
	for {
		select {
		case err := <-s.errs:
			errs = append(errs, err)
		default:
			return errors.Join(errs...)
		}
	}
}
