package links

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// Limits of what the store accepts.
const (
	// MaxURLLen is the longest URL, in bytes: what browsers and proxies
	// reliably pass along, and small enough for a unique index.
	MaxURLLen = 2048
	// CodeLen is the length of new codes: 62^7 ≈ 3.5e12 codes, so random
	// codes collide rarely and are not guessable in sequence.
	CodeLen = 7
	// MaxCodeLen bounds what Resolve looks up.
	MaxCodeLen = 32
)

// ErrNotFound is returned by Resolve for a code that names no link.
var ErrNotFound = errors.New("no such link")

// InvalidURLError says why a URL is not accepted; the HTTP layer answers
// 400 with it.
type InvalidURLError struct{ Reason string }

func (e *InvalidURLError) Error() string { return "invalid url: " + e.Reason }

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate creates schema if needed and applies the shortener's migrations
// in it, with goose's version table schema.goose_db_version: floodgate's
// own migrations (schema floodgate) are neither read nor touched.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	cfg := pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	// CREATE SCHEMA IF NOT EXISTS races with itself (a unique violation on
	// the catalog) when two shortener replicas start together: take turns.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, lockID(schema)); err != nil {
		return fmt.Errorf("migrate schema %s: lock: %w", schema, err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema %s: %w", schema, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("create schema %s: %w", schema, err)
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID(schema)))
	if err != nil {
		return fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	files, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files,
		goose.WithTableName(schema+".goose_db_version"),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		return fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate schema %s: %w", schema, err)
	}
	return nil
}

// lockID is the advisory lock of schema's migrations: per schema, so that
// tests in schemas of their own do not wait for each other.
func lockID(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("floodgate.examples.shortener." + schema))
	return int64(h.Sum64() >> 1)
}

// Link is a stored link.
type Link struct {
	Code      string
	URL       string
	CreatedAt time.Time
}

// Store reads and writes links. It is safe for concurrent use.
type Store struct {
	pool  *pgxpool.Pool
	table string
}

// NewStore returns a Store over the links table of schema (after Migrate).
func NewStore(pool *pgxpool.Pool, schema string) *Store {
	return &Store{pool: pool, table: pgx.Identifier{schema, "links"}.Sanitize()}
}

// CheckURL returns the URL to store for raw, or an *InvalidURLError:
// absolute http(s) URLs with a host, without user info (user@host hides
// the real host from people reading the link), at most MaxURLLen bytes.
func CheckURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	switch {
	case raw == "":
		return "", &InvalidURLError{"url is required"}
	case len(raw) > MaxURLLen:
		return "", &InvalidURLError{fmt.Sprintf("%d bytes, at most %d", len(raw), MaxURLLen)}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", &InvalidURLError{strings.TrimPrefix(err.Error(), "parse ")}
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", &InvalidURLError{fmt.Sprintf("scheme %q: want an absolute http or https URL", u.Scheme)}
	case u.Host == "" || u.Hostname() == "":
		return "", &InvalidURLError{"no host"}
	case u.User != nil:
		return "", &InvalidURLError{"user info (user@host) hides the real host"}
	}
	return u.String(), nil
}

// Create returns the link of rawURL, creating it with a new code unless the
// URL already has one (created false). creatorIP is recorded.
func (s *Store) Create(ctx context.Context, rawURL, creatorIP string) (Link, bool, error) {
	u, err := CheckURL(rawURL)
	if err != nil {
		return Link{}, false, err
	}
	for range 5 {
		l := Link{URL: u, Code: newCode()}
		err := s.pool.QueryRow(ctx, `INSERT INTO `+s.table+` (code, url, creator_ip) VALUES ($1, $2, $3)
			ON CONFLICT (url) DO NOTHING RETURNING created_at`, l.Code, u, creatorIP).Scan(&l.CreatedAt)
		switch {
		case err == nil:
			return l, true, nil
		case errors.Is(err, pgx.ErrNoRows): // the URL has a code already
			err = s.pool.QueryRow(ctx, `SELECT code, created_at FROM `+s.table+` WHERE url = $1`, u).Scan(&l.Code, &l.CreatedAt)
			if err != nil {
				return Link{}, false, fmt.Errorf("read link of %s: %w", u, err)
			}
			return l, false, nil
		case isUniqueViolation(err): // the random code is taken: draw again
			continue
		default:
			return Link{}, false, fmt.Errorf("create link %s: %w", u, err)
		}
	}
	return Link{}, false, fmt.Errorf("create link %s: 5 random codes in a row were taken", u)
}

// Resolve returns the URL of code, or ErrNotFound.
func (s *Store) Resolve(ctx context.Context, code string) (string, error) {
	if !ValidCode(code) {
		return "", ErrNotFound
	}
	var u string
	err := s.pool.QueryRow(ctx, `SELECT url FROM `+s.table+` WHERE code = $1`, code).Scan(&u)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", code, err)
	}
	return u, nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// ValidCode reports whether code could be a code: 1..MaxCodeLen base62
// characters. Anything else is not looked up.
func ValidCode(code string) bool {
	if code == "" || len(code) > MaxCodeLen {
		return false
	}
	for i := 0; i < len(code); i++ {
		if !strings.ContainsRune(alphabet, rune(code[i])) {
			return false
		}
	}
	return true
}

// newCode draws CodeLen base62 characters from crypto/rand (rejection
// sampling keeps them uniform).
func newCode() string {
	b := make([]byte, 0, CodeLen)
	var buf [16]byte
	for len(b) < CodeLen {
		_, _ = rand.Read(buf[:]) // crypto/rand.Read never fails (Go 1.24+)
		for _, c := range buf {
			if c < 248 && len(b) < CodeLen { // 248 = 4*62
				b = append(b, alphabet[c%62])
			}
		}
	}
	return string(b)
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
