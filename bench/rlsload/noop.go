package rlsload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/floodgate-dev/floodgate/internal/decide"
)

// Noop is envoy.service.ratelimit.v3.RateLimitService answering OK without
// work: one OK status per descriptor, the least an answer Envoy accepts can
// hold. Its throughput is what the RPC framework allows on the machine.
type Noop struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

var _ rlsv3.RateLimitServiceServer = Noop{}

// ShouldRateLimit answers OK for every descriptor.
func (Noop) ShouldRateLimit(_ context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(in.GetDescriptors()))
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: st}, nil
}

// NewNoopServer returns a gRPC server serving Noop with the options
// `floodgate limiter` gives its RLS server (decide.RLSServerOptions; no
// auth token), so that the two differ by the work done per call alone.
func NewNoopServer() *grpc.Server {
	s := grpc.NewServer(decide.RLSServerOptions(decide.DefaultMaxRequestBytes, decide.DefaultMaxConcurrentStreams)...)
	rlsv3.RegisterRateLimitServiceServer(s, Noop{})
	return s
}

// ServeNoop serves Noop on addr until ctx ends, then stops gracefully.
func ServeNoop(ctx context.Context, addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("rls noop: listen %s: %w", addr, err)
	}
	srv := NewNoopServer()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("rls noop serving", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("rls noop: serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	srv.GracefulStop()
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("rls noop: serve %s: %w", ln.Addr(), err)
	}
	return nil
}
