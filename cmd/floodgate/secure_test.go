package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go/sasl/scram"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
	"github.com/floodgate-dev/floodgate/internal/topics"
)

// secureEnv runs floodgate against the secure profile (scripts/stack up
// --secure): every service needs TLS and credentials, every secret is a file.
type secureEnv struct {
	t                     *testing.T
	bin, dir              string
	sec                   *stacktest.SecureStack
	env                   []string
	topic, dlq, decisions string
	prefix, action, rules string
}

func newSecureEnv(t *testing.T) *secureEnv {
	t.Helper()
	sec := stacktest.Secure(t)
	id := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	e := &secureEnv{
		t: t, bin: servicetest.Build(t, servicetest.Floodgate), dir: t.TempDir(), sec: sec,
		topic: "fgtest.secure-" + id, prefix: "fgtest-secure-" + id, action: "secure_e2e_" + strings.ReplaceAll(id, "-", "_"),
	}
	e.dlq, e.decisions = e.topic+".dlq", e.topic+".decisions"
	e.rules = filepath.Join(e.dir, "rules.yaml")
	rules := fmt.Sprintf("rules:\n  - name: secure-e2e\n    action: %s\n    kinds: [ip]\n    limits: [3/m]\n", e.action)
	if err := os.WriteFile(e.rules, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing of the caller's FLOODGATE_* settings (the default profile's,
	// usually): only the secure profile's.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOODGATE_") {
			e.env = append(e.env, kv)
		}
	}
	e.env = append(e.env, sec.Env()...)
	e.env = append(e.env, "FLOODGATE_TOPIC="+e.topic, "FLOODGATE_DLQ_TOPIC="+e.dlq, "FLOODGATE_DECISIONS_TOPIC="+e.decisions,
		"FLOODGATE_KEY_PREFIX="+e.prefix, "FLOODGATE_RULES="+e.rules)
	return e
}

// with returns env with the given KEY=VALUE settings replacing its own;
// a bare KEY removes it.
func with(env []string, kvs ...string) []string {
	out := append([]string(nil), env...)
	for _, kv := range kvs {
		key, _, _ := strings.Cut(kv, "=")
		out = slicesDeleteFunc(out, func(s string) bool { return strings.HasPrefix(s, key+"=") })
		if strings.Contains(kv, "=") {
			out = append(out, kv)
		}
	}
	return out
}

func slicesDeleteFunc(s []string, del func(string) bool) []string {
	out := s[:0]
	for _, v := range s {
		if !del(v) {
			out = append(out, v)
		}
	}
	return out
}

// run runs floodgate to its end (a minute at most) and returns its output.
func (e *secureEnv) run(env []string, args ...string) (string, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		e.t.Fatalf("floodgate %s hung (killed after a minute); output:\n%s", strings.Join(args, " "), out)
	}
	return string(out), err
}

func (e *secureEnv) mustRun(args ...string) string {
	e.t.Helper()
	out, err := e.run(e.env, args...)
	if err != nil {
		e.t.Fatalf("floodgate %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// start runs a long-lived floodgate until the test ends.
func (e *secureEnv) start(name string, args ...string) {
	e.t.Helper()
	cmd := exec.Command(e.bin, args...)
	cmd.Env = e.env
	logPath := filepath.Join(e.dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		e.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	e.t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if e.t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			e.t.Logf("---- %s log (tail) ----\n%s", name, b)
		}
	})
}

func (e *secureEnv) kafka(t *testing.T) kafkaconn.Cluster {
	pw, err := os.ReadFile(e.sec.KafkaPasswordFile)
	if err != nil {
		t.Fatal(err)
	}
	m, err := scram.Mechanism(scram.SHA512, e.sec.KafkaUser, strings.TrimSpace(string(pw)))
	if err != nil {
		t.Fatal(err)
	}
	return kafkaconn.Cluster{Brokers: e.sec.Brokers, Security: kafkaconn.Security{TLS: e.sec.ClientTLS(t), SASL: m}}
}

// TestSecurePipeline runs the whole pipeline over the secure profile:
// topics and migrations, produce → aggregator (live and history) → a deny
// over TLS RLS → history → roller → query.
func TestSecurePipeline(t *testing.T) {
	e := newSecureEnv(t)
	// Client certificates too: the broker and Redis verify one when it is
	// presented (ssl.client.auth=requested, tls-auth-clients optional).
	e.env = with(e.env, "FLOODGATE_KAFKA_TLS_CERT="+e.sec.ClientCert, "FLOODGATE_KAFKA_TLS_KEY="+e.sec.ClientKey,
		"FLOODGATE_REDIS_TLS_CERT="+e.sec.ClientCert, "FLOODGATE_REDIS_TLS_KEY="+e.sec.ClientKey)
	kc := e.kafka(t)
	rdb := redis.NewClient(e.sec.RedisOptions(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := topics.DeleteOn(ctx, kc, e.topic, e.dlq, e.decisions); err != nil {
			t.Logf("delete topics: %v", err)
		}
		if err := stacktest.DeletePrefix(ctx, rdb, e.prefix); err != nil {
			t.Logf("delete keys: %v", err)
		}
		_ = rdb.Close()
	})

	e.mustRun("topics", "--partitions", "3", "--dlq-partitions", "1", "--decisions-partitions", "1")
	e.mustRun("migrate", "up")

	aggAddr, httpAddr, rlsAddr, adminAddr := servicetest.FreeAddr(t), servicetest.FreeAddr(t), servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	id := strings.TrimPrefix(e.topic, "fgtest.")
	e.start("aggregator", "aggregator", "--metrics-addr", aggAddr, "--live-group", "fgtest-live-"+id, "--history-group", "fgtest-history-"+id)
	e.start("limiter", "limiter", "serve", "--http-addr", httpAddr, "--rls-addr", rlsAddr, "--admin-addr", adminAddr)

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: e.sec.ClientTLS(t)}, Timeout: 5 * time.Second}
	ready := func(url string) func() bool {
		return func() bool {
			resp, err := client.Get(url)
			if err != nil {
				return false
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}
	}
	stacktest.WaitFor(t, "aggregator healthy", time.Minute, ready("http://"+aggAddr+"/healthz"))
	stacktest.WaitFor(t, "limiter ready over TLS", time.Minute, ready("https://"+httpAddr+"/readyz"))

	// A plaintext client on the limiter's TLS port is told so.
	if resp, err := http.Get("http://" + httpAddr + "/readyz"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "HTTPS server") {
			t.Errorf("plaintext request on the TLS port: %s %q, want 400 ... HTTPS server", resp.Status, b)
		}
	}

	const subject = "203.0.113.9"
	var lines strings.Builder
	for i := range 5 {
		fmt.Fprintf(&lines, `{"action":%q,"kind":"ip","subject":%q,"id":"secure-%s-%d"}`+"\n", e.action, subject, id, i)
	}
	cmd := exec.Command(e.bin, "produce", "--stdin", "--no-create-topics")
	cmd.Env, cmd.Stdin = e.env, strings.NewReader(lines.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("produce: %v\n%s", err, out)
	}

	// Envoy's call, over TLS, with the bearer token.
	conn, err := grpc.NewClient(rlsAddr, grpc.WithTransportCredentials(credentials.NewTLS(e.sec.ClientTLS(t))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	token, err := os.ReadFile(e.sec.AuthTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	rls := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: e.action, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "ip", Value: subject}}}}}
	var last string
	stacktest.WaitFor(t, "a deny over TLS RLS", time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := rls.ShouldRateLimit(ctx, req)
		if err != nil {
			last = err.Error()
			return false
		}
		last = resp.GetOverallCode().String()
		return resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT
	})
	t.Logf("rls answer: %s", last)

	// The admin listener is TLS too, its token from a file.
	adminToken, err := os.ReadFile(e.sec.AdminTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	_, secret, _ := strings.Cut(strings.TrimSpace(string(adminToken)), "=")
	areq, err := http.NewRequest(http.MethodGet, "https://"+adminAddr+"/v1/admin/inspect?action="+e.action+"&ip="+subject, nil)
	if err != nil {
		t.Fatal(err)
	}
	areq.Header.Set("Authorization", "Bearer "+secret)
	aresp, err := client.Do(areq)
	if err != nil {
		t.Fatalf("admin inspect over TLS: %v", err)
	}
	ab, _ := io.ReadAll(aresp.Body)
	aresp.Body.Close()
	if aresp.StatusCode != http.StatusOK {
		t.Fatalf("admin inspect over TLS: %s %s", aresp.Status, ab)
	}
	// The container health check, over TLS.
	e.mustRun("health", "--tls-ca", e.sec.CA, "https://"+httpAddr+"/readyz")

	total := func() string {
		out, _ := e.run(e.env, "query", "total", "-a", e.action, "-s", subject)
		return out
	}
	stacktest.WaitFor(t, "history counts the 5 events", time.Minute, func() bool { return strings.HasPrefix(total(), "5\t") })
	e.mustRun("roller", "once")
	if out := total(); !strings.HasPrefix(out, "5\t") {
		t.Fatalf("query total after the roller: %q, want 5", out)
	}
}

// TestSecureStartFailures: a wrong password, an untrusted certificate, a
// plaintext client on a TLS port: each fails the start at once with a
// message naming the service and the cause.
func TestSecureStartFailures(t *testing.T) {
	e := newSecureEnv(t)
	other := otherCA(t, e.dir)
	wrong := filepath.Join(e.dir, "wrong-password")
	if err := os.WriteFile(wrong, []byte("not-the-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pgURL := func(edit func(string) string) string {
		p := filepath.Join(e.dir, fmt.Sprintf("pg-url-%d", time.Now().UnixNano()))
		if err := os.WriteFile(p, []byte(edit(e.sec.PostgresURL)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	limiter := []string{"limiter", "serve", "--http-addr", "127.0.0.1:0", "--rls-addr", "off"}
	query := []string{"query", "total", "-a", e.action}
	topicsCmd := []string{"topics"}
	cases := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"redis wrong password", []string{"FLOODGATE_REDIS_PASSWORD_FILE=" + wrong}, limiter,
			[]string{"redis 127.0.0.1:", "authentication failed: wrong username or password", "WRONGPASS"}},
		{"redis untrusted certificate", []string{"FLOODGATE_REDIS_TLS_CA=" + other}, limiter,
			[]string{"redis 127.0.0.1:", "not signed by a trusted CA"}},
		{"redis plaintext on the TLS port", []string{"FLOODGATE_REDIS_TLS", "FLOODGATE_REDIS_TLS_CA"}, limiter,
			[]string{"redis 127.0.0.1:", "is it a TLS port"}},
		{"kafka wrong SASL password", []string{"FLOODGATE_KAFKA_SASL_PASSWORD_FILE=" + wrong}, topicsCmd,
			[]string{"kafka 127.0.0.1:", "SASL SCRAM-SHA-512 authentication failed: wrong username or password"}},
		{"kafka untrusted certificate", []string{"FLOODGATE_KAFKA_TLS_CA=" + other}, topicsCmd,
			[]string{"kafka 127.0.0.1:", "not signed by a trusted CA"}},
		{"kafka plaintext on the SASL_SSL port", []string{"FLOODGATE_KAFKA_TLS", "FLOODGATE_KAFKA_TLS_CA"}, topicsCmd,
			[]string{"kafka 127.0.0.1:", "is it a TLS or SASL listener"}},
		{"postgres wrong password", []string{"FLOODGATE_POSTGRES_URL_FILE=" + pgURL(func(u string) string {
			return strings.Replace(u, "floodgate:", "floodgate:x", 1)
		})}, query, []string{"postgres 127.0.0.1:", "authentication failed"}},
		{"postgres untrusted certificate", []string{"FLOODGATE_POSTGRES_URL_FILE=" + pgURL(func(u string) string {
			return strings.Replace(u, "sslrootcert="+e.sec.CA, "sslrootcert="+other, 1)
		})}, query, []string{"postgres 127.0.0.1:", "not signed by a trusted CA"}},
		{"postgres plaintext", []string{"FLOODGATE_POSTGRES_URL_FILE=" + pgURL(func(u string) string {
			return strings.Replace(u, "sslmode=verify-full", "sslmode=disable", 1)
		})}, query, []string{"postgres 127.0.0.1:", "pg_hba.conf"}},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			out, err := e.run(with(e.env, c.env...), c.args...)
			if err == nil {
				t.Fatalf("started; want a failure\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			// No secret in the message.
			for _, f := range []string{e.sec.RedisPasswordFile, e.sec.KafkaPasswordFile} {
				if b, _ := os.ReadFile(f); len(b) > 0 && strings.Contains(out, strings.TrimSpace(string(b))) {
					t.Errorf("output holds the secret of %s", f)
				}
			}
		})
	}
}

// otherCA writes a CA certificate that signed nothing of the stack's.
func otherCA(t *testing.T, dir string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the stack's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "other-ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSecureLimiterRequiresClientCertificates: with --tls-client-ca the
// limiter's listeners (RLS as Envoy in a mesh calls it, and HTTP) serve
// only clients whose certificate the CA signed.
func TestSecureLimiterRequiresClientCertificates(t *testing.T) {
	e := newSecureEnv(t)
	kc := e.kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := topics.EnsureOn(ctx, kc, topics.Spec{Name: e.topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = topics.DeleteOn(ctx, kc, e.topic)
	})
	httpAddr, rlsAddr := servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	e.env = append(e.env, "FLOODGATE_TLS_CLIENT_CA="+e.sec.CA)
	e.start("limiter", "limiter", "serve", "--http-addr", httpAddr, "--rls-addr", rlsAddr, "--no-publish")

	withCert := e.sec.ClientTLS(t)
	cert, err := tls.LoadX509KeyPair(e.sec.ClientCert, e.sec.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	withCert.Certificates = []tls.Certificate{cert}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: withCert}, Timeout: 5 * time.Second}
	stacktest.WaitFor(t, "limiter ready over mTLS", time.Minute, func() bool {
		resp, err := client.Get("https://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: e.sec.ClientTLS(t)}, Timeout: 5 * time.Second}
	if resp, err := anon.Get("https://" + httpAddr + "/readyz"); err == nil {
		resp.Body.Close()
		t.Fatalf("HTTP without a client certificate: %s, want a refused handshake", resp.Status)
	}

	token, err := os.ReadFile(e.sec.AuthTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	call := func(cfg *tls.Config) error {
		conn, err := grpc.NewClient(rlsAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.TrimSpace(string(token)))
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: e.action,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "ip", Value: "203.0.113.1"}}}}})
		return err
	}
	if err := call(withCert); err != nil {
		t.Fatalf("RLS with a client certificate: %v", err)
	}
	if err := call(e.sec.ClientTLS(t)); err == nil {
		t.Fatal("RLS without a client certificate answered")
	}
}

// TestLimiterWarnsWithoutTokenBeyondLoopback: listening on every interface
// without a token is allowed but logged as a WARN at start.
func TestLimiterWarnsWithoutTokenBeyondLoopback(t *testing.T) {
	e := newSecureEnv(t)
	kc := e.kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := topics.EnsureOn(ctx, kc, topics.Spec{Name: e.topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = topics.DeleteOn(ctx, kc, e.topic)
	})
	_, port, _ := strings.Cut(servicetest.FreeAddr(t), ":")
	e.env = with(e.env, "FLOODGATE_AUTH_TOKEN_FILE", "FLOODGATE_ADMIN_TOKEN_FILE")
	e.start("limiter", "limiter", "serve", "--http-addr", "0.0.0.0:"+port, "--rls-addr", "off", "--no-publish")
	logPath := filepath.Join(e.dir, "limiter.log")
	stacktest.WaitFor(t, "the limiter started", time.Minute, func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "limiter started")
	})
	b, _ := os.ReadFile(logPath)
	if !strings.Contains(string(b), "level=WARN") || !strings.Contains(string(b), "beyond loopback without a token") {
		t.Fatalf("no WARN about listening beyond loopback without a token:\n%s", b)
	}
}
