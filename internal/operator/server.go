package operator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// DefaultAdminAddr is where the admin endpoints listen by default: loopback
// only, apart from the limiter's public surfaces.
const DefaultAdminAddr = "127.0.0.1:8082"

// ServerConfig configures a Server.
type ServerConfig struct {
	Operator *Operator // required
	Tokens   []Token   // at least one; ParseTokens
	// Addr is the admin listener. Default DefaultAdminAddr; port 0 picks one.
	Addr string
	// MaxRequestBytes bounds request bodies. Default 64 KiB.
	MaxRequestBytes int64
	// TLS, when set, serves HTTPS (with client certificates when it asks
	// for them).
	TLS    *tls.Config
	Logger *slog.Logger
}

// Server serves the admin endpoints on a listener of their own.
type Server struct {
	cfg  ServerConfig
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// NewServer validates cfg and builds the handler; Start listens.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAdminAddr
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("admin server: address %q: %w", cfg.Addr, err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h, err := NewHandler(cfg.Operator, cfg.Tokens, cfg.MaxRequestBytes)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, done: make(chan error, 1), srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}}, nil
}

// Start listens and serves in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen admin %s: %w", s.cfg.Addr, err)
	}
	s.ln = ln
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	if ap, err := netipAddr(ln.Addr()); err == nil && !ap.IsLoopback() && s.cfg.TLS == nil {
		s.cfg.Logger.Warn("admin endpoints listen beyond loopback: put them behind TLS and a firewall", "addr", ln.Addr().String())
	}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	s.cfg.Logger.Info("admin endpoints serving", "addr", ln.Addr().String(), "operators", len(s.cfg.Tokens), "tls", s.cfg.TLS != nil)
	return nil
}

// Addr returns the bound address (after Start).
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Err yields the error of a listener that failed while serving.
func (s *Server) Err() <-chan error { return s.done }

// Shutdown stops accepting and lets requests in flight finish until ctx
// ends.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.ln == nil {
		return nil
	}
	if err := s.srv.Shutdown(ctx); err != nil {
		return errors.Join(fmt.Errorf("shutdown admin: %w", err), s.srv.Close())
	}
	return nil
}

func netipAddr(a net.Addr) (netip.Addr, error) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}, err
	}
	return ap.Addr(), nil
}
