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

	"floodgate/dashboard"
	"floodgate/history"
)

// DashboardCmd serves the web dashboard.
type DashboardCmd struct {
	PostgresFlags
	KafkaConnFlags
	ListenTLSFlags
	DecisionsTopic string        `name:"decisions-topic" env:"FLOODGATE_DECISIONS_TOPIC" default:"floodgate.decisions" help:"Topic of deny decisions shown."`
	Addr           string        `name:"addr" env:"FLOODGATE_DASHBOARD_ADDR" default:"127.0.0.1:8090" help:"Listen address (loopback by default: the dashboard has no authentication)."`
	Action         string        `name:"action" env:"FLOODGATE_DASHBOARD_ACTION" default:"visit" help:"Action shown by default."`
	Kind           string        `name:"kind" env:"FLOODGATE_DASHBOARD_KIND" default:"link" help:"Kind shown by default (empty: every kind)."`
	Recent         int           `name:"recent" env:"FLOODGATE_DASHBOARD_RECENT" default:"50" help:"Deny decisions kept and shown."`
	Refresh        time.Duration `name:"refresh" env:"FLOODGATE_DASHBOARD_REFRESH" default:"5s" help:"How often the page refreshes itself."`
}

// Run serves until ctx ends.
func (c *DashboardCmd) Run(ctx context.Context, logger *slog.Logger) error {
	pool, err := c.PostgresFlags.historyPool(ctx, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := newRegistry()
	recent := dashboard.NewRecent(c.Recent)
	h, err := dashboard.New(dashboard.Config{
		History: history.NewQuerier(pool), Recent: recent, Action: c.Action, Kind: c.Kind,
		Refresh: c.Refresh, Logger: logger, Registerer: reg, Gatherer: reg,
	})
	if err != nil {
		return err
	}
	kc, err := c.KafkaCluster(ctx)
	if err != nil {
		return err
	}
	serverTLS, err := c.serverTLS(logger)
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
