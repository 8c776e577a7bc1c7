package stacktest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SecureStack is the secure profile of scripts/stack (`scripts/stack up
// --secure`): Redis TLS-only with an ACL user, a SASL_SSL-only Kafka broker
// (SCRAM), PostgreSQL with ssl=on and client certificates, one CA. Paths
// are files under the profile's directory; secrets are files too.
type SecureStack struct {
	Dir         string
	Brokers     []string // SASL_SSL, SCRAM-SHA-512 (and -256, PLAIN)
	RedisAddr   string   // TLS only
	PostgresURL string   // verify-full, password and client certificate; a secret

	CA                    string // the CA that signed every certificate
	ServerCert, ServerKey string // for 127.0.0.1 and localhost: the test's listeners may serve it
	ClientCert, ClientKey string // signed by CA, CN floodgate

	KafkaUser, KafkaPasswordFile string
	RedisUser, RedisPasswordFile string
	PostgresURLFile              string
	AuthTokenFile                string
	AdminTokenFile               string // name=secret
	KafkaCommandConfig           string // properties for Kafka's own tools
}

// Secure returns the secure profile after checking that each service
// answers: Redis a PING over TLS as its user, Kafka and PostgreSQL a TCP
// connection. Like the other accessors it fails the test when they do not
// (it skips only under -short outside CI).
func Secure(tb testing.TB) *SecureStack {
	tb.Helper()
	dir := os.Getenv("FLOODGATE_SECURE_DIR")
	if dir == "" {
		root := os.Getenv("FLOODGATE_STACK_DIR")
		if root == "" {
			root = filepath.Join(repoRoot(), ".stack")
		}
		dir = filepath.Join(root, "secure")
	}
	port := func(env, def string) string {
		if v := os.Getenv(env); v != "" {
			return v
		}
		return def
	}
	tlsDir, secrets := filepath.Join(dir, "tls"), filepath.Join(dir, "secrets")
	s := &SecureStack{
		Dir:                dir,
		Brokers:            []string{"127.0.0.1:" + port("FLOODGATE_SECURE_KAFKA_PORT", "19094")},
		RedisAddr:          "127.0.0.1:" + port("FLOODGATE_SECURE_REDIS_PORT", "16380"),
		CA:                 filepath.Join(tlsDir, "ca.pem"),
		ServerCert:         filepath.Join(tlsDir, "server.pem"),
		ServerKey:          filepath.Join(tlsDir, "server.key"),
		ClientCert:         filepath.Join(tlsDir, "client.pem"),
		ClientKey:          filepath.Join(tlsDir, "client.key"),
		KafkaUser:          "floodgate",
		KafkaPasswordFile:  filepath.Join(secrets, "kafka-password"),
		RedisUser:          "floodgate",
		RedisPasswordFile:  filepath.Join(secrets, "redis-password"),
		PostgresURLFile:    filepath.Join(secrets, "postgres-url"),
		AuthTokenFile:      filepath.Join(secrets, "auth-token"),
		AdminTokenFile:     filepath.Join(secrets, "admin-token"),
		KafkaCommandConfig: filepath.Join(dir, "kafka", "client.properties"),
	}
	url, err := os.ReadFile(s.PostgresURLFile)
	if err != nil {
		unavailableStart(tb, "the secure profile", dir, "scripts/stack up --secure", err)
	}
	s.PostgresURL = strings.TrimSpace(string(url))
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	rdb := redis.NewClient(s.RedisOptions(tb))
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		unavailableStart(tb, "Redis (secure profile)", s.RedisAddr, "scripts/stack up --secure", err)
	}
	for _, a := range []string{s.Brokers[0], "127.0.0.1:" + port("FLOODGATE_SECURE_PG_PORT", "15433")} {
		conn, err := net.DialTimeout("tcp", a, probeTimeout)
		if err != nil {
			unavailableStart(tb, "the secure profile", a, "scripts/stack up --secure", err)
		}
		_ = conn.Close()
	}
	return s
}

// ClientTLS trusts the profile's CA.
func (s *SecureStack) ClientTLS(tb testing.TB) *tls.Config {
	tb.Helper()
	pem, err := os.ReadFile(s.CA)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		tb.Fatalf("no certificate in %s", s.CA)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// RedisOptions reach the profile's Redis as its ACL user over TLS.
func (s *SecureStack) RedisOptions(tb testing.TB) *redis.Options {
	tb.Helper()
	pw, err := os.ReadFile(s.RedisPasswordFile)
	if err != nil {
		unavailableStart(tb, "the secure profile", s.Dir, "scripts/stack up --secure", err)
	}
	return &redis.Options{Addr: s.RedisAddr, Username: s.RedisUser, Password: strings.TrimSpace(string(pw)),
		TLSConfig: s.ClientTLS(tb), DialTimeout: time.Second}
}

// Env is what `scripts/stack env --secure` exports: floodgate's settings
// for the profile, every secret as a file.
func (s *SecureStack) Env() []string {
	return []string{
		"FLOODGATE_BROKERS=" + strings.Join(s.Brokers, ","),
		"FLOODGATE_KAFKA_TLS=true",
		"FLOODGATE_KAFKA_TLS_CA=" + s.CA,
		"FLOODGATE_KAFKA_SASL_MECHANISM=scram-sha-512",
		"FLOODGATE_KAFKA_SASL_USERNAME=" + s.KafkaUser,
		"FLOODGATE_KAFKA_SASL_PASSWORD_FILE=" + s.KafkaPasswordFile,
		"FLOODGATE_REDIS_ADDR=" + s.RedisAddr,
		"FLOODGATE_REDIS_CLUSTER=false",
		"FLOODGATE_REDIS_TLS=true",
		"FLOODGATE_REDIS_TLS_CA=" + s.CA,
		"FLOODGATE_REDIS_USERNAME=" + s.RedisUser,
		"FLOODGATE_REDIS_PASSWORD_FILE=" + s.RedisPasswordFile,
		"FLOODGATE_POSTGRES_URL_FILE=" + s.PostgresURLFile,
		"FLOODGATE_TLS_CERT=" + s.ServerCert,
		"FLOODGATE_TLS_KEY=" + s.ServerKey,
		"FLOODGATE_AUTH_TOKEN_FILE=" + s.AuthTokenFile,
		"FLOODGATE_ADMIN_TOKEN_FILE=" + s.AdminTokenFile,
	}
}

// repoRoot is the directory holding go.mod, from the working directory up.
func repoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}
