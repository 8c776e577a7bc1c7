package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/floodgate-dev/floodgate/internal/dashboard"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/metrics"
	"github.com/floodgate-dev/floodgate/internal/secretfile"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles"
)

// DashboardCmd serves the web dashboard.
type DashboardCmd struct {
	PostgresFlags
	KafkaConnFlags
	ListenTLSFlags
	DecisionsTopic string        `name:"decisions-topic" env:"FLOODGATE_DECISIONS_TOPIC" default:"floodgate.decisions" help:"Topic of deny decisions shown."`
	Addr           string        `name:"addr" env:"FLOODGATE_DASHBOARD_ADDR" default:"127.0.0.1:8090" help:"Listen address (loopback by default; beyond it, give --auth-token-file and --tls-cert: the page shows personal subjects)."`
	AuthToken      string        `name:"auth-token" env:"FLOODGATE_DASHBOARD_AUTH_TOKEN" help:"Token required on every route but /healthz and /metrics: Bearer, or the password of HTTP Basic (any user name; a browser asks). Empty: none. Prefer --auth-token-file."`
	AuthTokenFile  string        `name:"auth-token-file" env:"FLOODGATE_DASHBOARD_AUTH_TOKEN_FILE" help:"File holding the dashboard's token (wins over --auth-token)."`
	Action         string        `name:"action" env:"FLOODGATE_DASHBOARD_ACTION" default:"visit" help:"Action shown by default."`
	Kind           string        `name:"kind" env:"FLOODGATE_DASHBOARD_KIND" default:"link" help:"Kind shown by default (empty: every kind)."`
	Recent         int           `name:"recent" env:"FLOODGATE_DASHBOARD_RECENT" default:"50" help:"Deny decisions kept and shown."`
	Refresh        time.Duration `name:"refresh" env:"FLOODGATE_DASHBOARD_REFRESH" default:"5s" help:"How often the page refreshes itself."`
}

// Run serves until ctx ends.
func (c *DashboardCmd) Run(ctx context.Context, logger *slog.Logger) error {
	token, serverTLS, err := c.access(logger)
	if err != nil {
		return err
	}
	pool, err := c.PostgresFlags.Pool(ctx, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := metrics.NewRegistry()
	recent := dashboard.NewRecent(c.Recent)
	h, err := dashboard.New(dashboard.Config{
		History: history.NewQuerier(pool), Recent: recent, Action: c.Action, Kind: c.Kind,
		Refresh: c.Refresh, Token: token, Logger: logger, Registerer: reg, Gatherer: reg,
	})
	if err != nil {
		return err
	}
	kc, err := c.KafkaCluster(ctx)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("dashboard listener %s: %w", c.Addr, err)
	}
	scheme := "http"
	if serverTLS != nil {
		ln, scheme = tls.NewListener(ln, serverTLS), "https"
	}
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		dashboard.FollowOn(fctx, kc, c.DecisionsTopic, recent, logger)
	}()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	logger.Info("dashboard started", "url", scheme+"://"+ln.Addr().String()+"/", "decisions", c.DecisionsTopic)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err = <-errc:
		err = fmt.Errorf("dashboard server: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if serr := srv.Shutdown(sctx); serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			err = serr
		}
	}
	stopFollow()
	<-followed
	logger.Info("dashboard stopped", "err", err)
	return err
}

// access is the dashboard's token and TLS; it warns when the dashboard
// listens beyond loopback without both: the page shows personal subjects
// (top IPs, e-mail addresses, deny decisions), and a token sent in clear
// is anyone's on the path.
func (c *DashboardCmd) access(logger *slog.Logger) (token string, tlsCfg *tls.Config, err error) {
	token, err = secretfile.Read("auth-token", c.AuthToken, c.AuthTokenFile)
	if err != nil {
		return "", nil, err
	}
	tlsCfg, err = c.ServerTLS(logger)
	if err != nil {
		return "", nil, err
	}
	if tlsfiles.BeyondLoopback(c.Addr) && (token == "" || tlsCfg == nil) {
		logger.Warn("the dashboard listens beyond loopback without a token or TLS: whoever reaches it reads personal subjects; set --auth-token-file and --tls-cert/--tls-key",
			"addr", c.Addr, "token", token != "", "tls", tlsCfg != nil)
	}
	return token, tlsCfg, nil
}
