package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"

	"github.com/floodgate-dev/floodgate/internal/adminapi"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/secretfile"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles"
)

// adminClientFlags send the operator commands through a limiter's admin
// endpoints: the operator then needs only the admin URL and a token, no
// Redis or Kafka credentials, and the audit names the token's operator.
type adminClientFlags struct {
	AdminURL       string `name:"admin-url" env:"FLOODGATE_ADMIN_URL" help:"A limiter's admin endpoints, e.g. https://limiter:8082: run the command through them (needs --admin-token-file; the Redis, Kafka and rules flags are then unused)."`
	AdminTokenFile string `name:"admin-token-file" env:"FLOODGATE_ADMIN_TOKEN_FILE" help:"File holding the admin token's secret (or the single name=secret line the limiter reads), for --admin-url."`
	AdminTLSCA     string `name:"admin-tls-ca" env:"FLOODGATE_ADMIN_TLS_CA" help:"PEM CA trusted for an https --admin-url (default: the system's)."`
	AdminTLSCert   string `name:"admin-tls-cert" env:"FLOODGATE_ADMIN_TLS_CERT" help:"PEM client certificate, for an admin listener that requires one (with --admin-tls-key)."`
	AdminTLSKey    string `name:"admin-tls-key" env:"FLOODGATE_ADMIN_TLS_KEY" help:"PEM key of --admin-tls-cert."`
}

// adminClient builds the client of --admin-url.
func (f *adminClientFlags) adminClient(logger *slog.Logger) (*adminapi.Client, error) {
	if f.AdminTokenFile == "" {
		return nil, fmt.Errorf("--admin-url needs --admin-token-file (FLOODGATE_ADMIN_TOKEN_FILE): the admin endpoints take only admin tokens")
	}
	tok, err := secretfile.Read("admin-token", "", f.AdminTokenFile)
	if err != nil {
		return nil, err
	}
	// The limiter's token file holds name=secret: one such line is read as
	// the limiter reads it, so the same file (and variable) serves both.
	if ts, err := operator.ParseTokens([]string{tok}); err == nil && len(ts) == 1 {
		tok = ts[0].Secret
	}
	if strings.ContainsAny(tok, " \t\r\n,") {
		return nil, fmt.Errorf("--admin-token-file %s holds several tokens: give a file of one (the secret, or one name=secret line)", f.AdminTokenFile)
	}
	cfg := adminapi.ClientConfig{BaseURL: f.AdminURL, Token: tok}
	u, err := url.Parse(f.AdminURL)
	if err != nil {
		return nil, fmt.Errorf("--admin-url: %w", err)
	}
	tlsSet := f.AdminTLSCA != "" || f.AdminTLSCert != "" || f.AdminTLSKey != ""
	switch {
	case u.Scheme == "https":
		if cfg.TLS, err = tlsfiles.Client(tlsfiles.ClientFiles{CA: f.AdminTLSCA, Cert: f.AdminTLSCert, Key: f.AdminTLSKey}); err != nil {
			return nil, fmt.Errorf("--admin-tls-*: %w", err)
		}
	case tlsSet:
		return nil, fmt.Errorf("--admin-tls-* given for %s: use an https:// admin URL", u.Redacted())
	case tlsfiles.BeyondLoopback(net.JoinHostPort(u.Hostname(), "0")):
		logger.Warn("admin token sent without TLS beyond loopback: use an https:// admin URL", "admin_url", u.Redacted())
	}
	c, err := adminapi.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("--admin-url: %w", err)
	}
	return c, nil
}
