package operator_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/adminapi"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles"
)

// testCA issues certificates for the TLS tests: the server's for 127.0.0.1
// and a client's.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	path string
}

func newTestCA(t *testing.T, dir string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "floodgate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, path: path}
}

func (c *testCA) issue(t *testing.T, dir, cn string, serial int64, usage x509.ExtKeyUsage) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+".key")
	for p, b := range map[string][]byte{
		certPath: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPath:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certPath, keyPath
}

// The admin client over TLS: an admin listener that requires client
// certificates (mTLS) is reached by adminapi.Client and by the CLI's
// --admin-url https with --admin-tls-ca, --admin-tls-cert and --admin-tls-key;
// without the CA or the client certificate the command fails, naming TLS.
func TestAdminClientOverTLS(t *testing.T) {
	rdb := stacktest.Redis(t)
	e := newEnv(t, rdb, stacktest.Prefix(t, rdb))
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	srvCert, srvKey := ca.issue(t, dir, "server", 2, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.issue(t, dir, "client", 3, x509.ExtKeyUsageClientAuth)
	serverTLS, err := tlsfiles.Server(tlsfiles.ServerFiles{Cert: srvCert, Key: srvKey, ClientCA: ca.path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := operator.ParseTokens([]string{"erin=" + aliceSecret})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := operator.NewServer(operator.ServerConfig{Operator: e.op, Tokens: tokens, Addr: "127.0.0.1:0", TLS: serverTLS})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	url := "https://" + srv.Addr()
	ctx := context.Background()

	clientTLS, err := tlsfiles.Client(tlsfiles.ClientFiles{CA: ca.path, Cert: cliCert, Key: cliKey})
	if err != nil {
		t.Fatal(err)
	}
	c, err := adminapi.NewClient(adminapi.ClientConfig{BaseURL: url, Token: aliceSecret, TLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	ban, err := c.Ban(ctx, operator.Request{Action: "login_failed", For: 90 * time.Minute, Message: "ticket 7",
		Subjects: req("login_failed", "ip", "203.0.113.70").Subjects})
	if err != nil {
		t.Fatal(err)
	}
	if ban.Operator != "erin" || ban.Until == nil || ban.Until.Sub(ban.At) != 90*time.Minute || ban.Message != "ticket 7" {
		t.Fatalf("ban over TLS: %+v", ban)
	}
	// A bad request: the server's message, as an *adminapi.Error.
	_, err = c.Unban(ctx, operator.Request{Action: "login_failed", Rule: "no-such-rule"})
	var ae *adminapi.Error
	if !errors.As(err, &ae) || ae.Status != 400 || !adminapi.IsInvalid(err) {
		t.Fatalf("unban without subjects: %v, want a 400 *adminapi.Error", err)
	}

	bin := servicetest.Build(t, servicetest.Floodgate)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(aliceSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"FLOODGATE_ADMIN_URL=" + url, "FLOODGATE_ADMIN_TOKEN_FILE=" + tokenFile, "FLOODGATE_REDIS_ADDR=127.0.0.1:1", "FLOODGATE_BROKERS=127.0.0.1:1"}
	out := runCLI(t, bin, append(env, "FLOODGATE_ADMIN_TLS_CA="+ca.path, "FLOODGATE_ADMIN_TLS_CERT="+cliCert, "FLOODGATE_ADMIN_TLS_KEY="+cliKey),
		"inspect", "--action", "login_failed", "ip=203.0.113.70")
	if !strings.Contains(string(out), "is banned by erin") || !strings.Contains(string(out), "ticket 7") {
		t.Fatalf("inspect over mTLS:\n%s", out)
	}
	for name, extra := range map[string][]string{
		"no CA":                 {"FLOODGATE_ADMIN_TLS_CERT=" + cliCert, "FLOODGATE_ADMIN_TLS_KEY=" + cliKey},
		"no client certificate": {"FLOODGATE_ADMIN_TLS_CA=" + ca.path},
	} {
		cmd := cliCommand(bin, append(env, extra...), "inspect", "--action", "login_failed", "ip=203.0.113.70")
		b, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(b), "tls") {
			t.Errorf("inspect with %s: %v\n%s", name, err, b)
		}
		t.Logf("%s: %s", name, strings.TrimSpace(string(b)))
	}
}
