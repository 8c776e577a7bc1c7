package migrations

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// CreateDatabase creates database name on the server of serverURL (whose
// role must be allowed to create databases), applies every migration to it
// with Up, as `floodgate migrate up` does, and returns its URL. A history
// of one's own — for a test, a benchmark run — is a database of one's own:
// the migrations install into schema floodgate only, so that what tests
// run is exactly what production runs.
func CreateDatabase(ctx context.Context, serverURL, name string) (dbURL string, err error) {
	dbURL, err = withDatabase(serverURL, name)
	if err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("create database %s: connect: %w", name, err)
	}
	defer func() { err = errors.Join(err, conn.Close(context.WithoutCancel(ctx))) }()
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	db, err := Open(ctx, dbURL)
	if err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	if _, err := Up(ctx, db); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return dbURL, nil
}

// DropDatabase drops database name of the server of serverURL, ending the
// sessions still connected to it. A database that does not exist is a
// success.
func DropDatabase(ctx context.Context, serverURL, name string) (err error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("drop database %s: connect: %w", name, err)
	}
	defer func() { err = errors.Join(err, conn.Close(context.WithoutCancel(ctx))) }()
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// withDatabase returns serverURL (a postgres:// URL or a key=value DSN)
// naming database name instead.
func withDatabase(serverURL, name string) (string, error) {
	if u, err := url.Parse(serverURL); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String(), nil
	}
	if strings.Contains(serverURL, "://") {
		return "", fmt.Errorf("postgres url %q: want postgres:// or key=value", serverURL)
	}
	return serverURL + " dbname=" + name, nil
}
