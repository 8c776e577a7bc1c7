// Package postgres holds how floodgate's processes reach the PostgreSQL
// database of history: the URL (TLS and client certificates in it, as pgx
// parses them) from flags every such process shares, and pools whose
// sessions run in UTC and whose failed start says why.
package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/floodgate-dev/floodgate/internal/secretfile"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles"
)

// Flags locate the PostgreSQL database holding history. TLS and
// client certificates go in the URL, as pgx parses them (sslmode=verify-full,
// sslrootcert, sslcert, sslkey).
type Flags struct {
	PostgresURL     string `name:"postgres-url" env:"FLOODGATE_POSTGRES_URL" default:"postgres://floodgate@127.0.0.1:15432/floodgate?sslmode=disable" help:"PostgreSQL connection URL (TLS: sslmode=verify-full&sslrootcert=...; client certificate: sslcert, sslkey). A password in it makes it a secret: prefer --postgres-url-file."`
	PostgresURLFile string `name:"postgres-url-file" env:"FLOODGATE_POSTGRES_URL_FILE" help:"File holding the PostgreSQL URL (wins over --postgres-url)."`
}

// URL is the URL, read from its file when one is given.
func (f *Flags) URL() (string, error) {
	return secretfile.Read("postgres-url", f.PostgresURL, f.PostgresURLFile)
}

// Pool opens a pool (Open) and checks at once that
// the server lets us in: a refused login or TLS handshake fails the start
// with its cause, while a server that is merely down is only logged, as
// historyPool's connections are made on use and retried.
func (f *Flags) Pool(ctx context.Context, logger *slog.Logger) (*pgxpool.Pool, error) {
	u, err := f.URL()
	if err != nil {
		return nil, err
	}
	pool, err := Open(u)
	if err != nil {
		return nil, err
	}
	if err := checkPostgres(ctx, pool); err != nil {
		if !Refused(err) {
			logger.Warn("postgres does not answer yet; connecting on use", "err", err)
			return pool, nil
		}
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// checkPostgres pings within 10 s; its error names PostgreSQL, the server
// and the likely cause. pgx's errors carry no password.
func checkPostgres(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := pool.Ping(ctx)
	if err == nil {
		return nil
	}
	cc := pool.Config().ConnConfig
	addr := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	var pgErr *pgconn.PgError
	cause := tlsfiles.Explain(err, cc.TLSConfig != nil, "sslrootcert= in the URL", "sslmode= in the URL")
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "28P01":
		cause = "authentication failed: wrong user or password: "
	case errors.As(err, &pgErr) && pgErr.Code == "28000":
		cause = "the server refused this connection (pg_hba.conf: TLS or a client certificate required?): "
	case strings.Contains(err.Error(), "server refused TLS connection"):
		cause = "the server does not accept TLS (sslmode=disable, or enable ssl on the server): "
	}
	return fmt.Errorf("postgres %s: %s%w", addr, cause, err)
}

// Refused says whether err is the server or TLS saying no (a start must
// fail), rather than the server not answering (it may come up later).
func Refused(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return true
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		recHeader tls.RecordHeaderError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &recHeader) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "tls:") || strings.Contains(msg, "x509:") || strings.Contains(msg, "server refused TLS")
}

// Open opens a pool without waiting for Postgres: connections are
// made on use, so an outage shows up as retried errors, not a failed start.
// Sessions run in UTC whatever the server's or role's TimeZone.
func Open(url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("--postgres-url: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	cfg.MaxConnIdleTime = time.Minute
	// History is UTC throughout (partitions, buckets, curves); the SQL
	// functions pin it themselves, and so does every session of ours.
	cfg.ConnConfig.RuntimeParams["timezone"] = "UTC"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres pool: %w", err)
	}
	return pool, nil
}
