package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"floodgate/limiter"
	"floodgate/operator"
	"floodgate/rules"
	"floodgate/window"
)

// AdminFlags configure the limiter's admin endpoints (package operator).
type AdminFlags struct {
	AdminAddr      string   `name:"admin-addr" env:"FLOODGATE_ADMIN_ADDR" default:"127.0.0.1:8082" help:"Admin endpoints /v1/admin/{inspect,ban,unban,reset}; served only with --admin-token."`
	AdminToken     []string `name:"admin-token" env:"FLOODGATE_ADMIN_TOKEN" sep:"," help:"Admin tokens as name=secret (comma separated; secrets of 16+ bytes, none equal to --auth-token); the name is the operator recorded in the audit. Empty: no admin endpoints. Prefer --admin-token-file."`
	AdminTokenFile string   `name:"admin-token-file" env:"FLOODGATE_ADMIN_TOKEN_FILE" help:"File of admin tokens, name=secret, one a line or comma separated (wins over --admin-token)."`
	LiveGroup      string   `name:"live-group" env:"FLOODGATE_LIVE_GROUP" default:"floodgate-live" help:"The aggregator's live consumer group: a reset records its offset as the boundary of what was reset."`
}

// adminServer is the limiter's admin listener, or nothing (nil) when no
// admin token is configured.
type adminServer struct{ srv *operator.Server }

// admin builds the admin endpoints over the limiter's own store, rules,
// decisions and memory; they are off without an admin token.
func (f *AdminFlags) admin(authToken string, serverTLS *tls.Config, topic string, store *window.Store, set func() *rules.Set, lim *limiter.Limiter, state *limiter.State,
	reg prometheus.Registerer, logger *slog.Logger) (*adminServer, error) {
	specs := f.AdminToken
	if f.AdminTokenFile != "" {
		b, err := os.ReadFile(f.AdminTokenFile)
		if err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
		specs = strings.FieldsFunc(string(b), func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
		if len(specs) == 0 {
			return nil, fmt.Errorf("--admin-token-file %s holds no token", f.AdminTokenFile)
		}
	}
	if len(specs) == 0 {
		return &adminServer{}, nil
	}
	tokens, err := operator.ParseTokens(specs)
	if err != nil {
		return nil, err
	}
	for _, t := range tokens {
		if authToken != "" && t.Secret == authToken {
			return nil, fmt.Errorf("admin token %q: its secret is the --auth-token; give the admin endpoints a secret of their own", t.Name)
		}
	}
	writer, err := operator.NewWriter(store)
	if err != nil {
		return nil, err
	}
	op, err := operator.New(operator.Config{
		Store: store, Writer: writer, Rules: set, Checker: lim, Applied: state.Seq, Group: f.LiveGroup, Topic: topic,
		Logger: logger, Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	srv, err := operator.NewServer(operator.ServerConfig{Operator: op, Tokens: tokens, Addr: f.AdminAddr, TLS: serverTLS, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &adminServer{srv: srv}, nil
}

func (a *adminServer) Start() error {
	if a.srv == nil {
		return nil
	}
	return a.srv.Start()
}

// Wait returns when ctx ends, or with the error of a failed listener.
func (a *adminServer) Wait(ctx context.Context) error {
	if a.srv == nil {
		<-ctx.Done()
		return nil
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-a.srv.Err():
		if err != nil {
			return err
		}
		return errors.New("admin listener stopped")
	}
}

func (a *adminServer) Shutdown(ctx context.Context) error {
	if a.srv == nil {
		return nil
	}
	return a.srv.Shutdown(ctx)
}
