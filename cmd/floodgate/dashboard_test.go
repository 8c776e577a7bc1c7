package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
)

// lockedBuffer is a log sink a running command writes and the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// dashboardCmd parses `floodgate dashboard args...` as main does.
func dashboardCmd(t *testing.T, args ...string) *DashboardCmd {
	t.Helper()
	var cli CLI
	parser, err := newParser(&cli, kong.Exit(func(int) { t.Fatalf("parser exited on %v", args) }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.Parse(append([]string{"dashboard"}, args...)); err != nil {
		t.Fatalf("floodgate dashboard %v: %v", args, err)
	}
	return &cli.Dashboard
}

// selfSigned writes a certificate and key for 127.0.0.1.
func selfSigned(t *testing.T) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// The dashboard shows personal subjects: beyond loopback without a token
// or without TLS it says so with a WARN at start (serving anyway, as the
// limiter does).
func TestDashboardWarnsBeyondLoopback(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("dashboard-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key := selfSigned(t)
	for _, tc := range []struct {
		name string
		args []string
		warn bool
	}{
		{"loopback", []string{"--addr", "127.0.0.1:8090"}, false},
		{"every interface", []string{"--addr", "0.0.0.0:8090"}, true},
		{"a token, no TLS", []string{"--addr", ":8090", "--auth-token-file", tokenFile}, true},
		{"TLS, no token", []string{"--addr", "0.0.0.0:8090", "--tls-cert", cert, "--tls-key", key}, true},
		{"a token and TLS", []string{"--addr", "0.0.0.0:8090", "--auth-token-file", tokenFile, "--tls-cert", cert, "--tls-key", key}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			token, tlsCfg, err := dashboardCmd(t, tc.args...).access(slog.New(slog.NewTextHandler(&log, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if warned := strings.Contains(log.String(), "level=WARN"); warned != tc.warn {
				t.Errorf("warned %t, want %t: %s", warned, tc.warn, log.String())
			}
			if strings.Contains(strings.Join(tc.args, " "), "--auth-token-file") != (token == "dashboard-token-0123456789") {
				t.Errorf("token %q read from %v", token, tc.args)
			}
			if strings.Contains(strings.Join(tc.args, " "), "--tls-cert") != (tlsCfg != nil) {
				t.Errorf("TLS %v from %v", tlsCfg != nil, tc.args)
			}
		})
	}
}

// `floodgate dashboard --auth-token-file`: the running dashboard answers
// 401 without the token and the page with it.
func TestDashboardServesOnlyWithToken(t *testing.T) {
	pool := historytest.Pool(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("dashboard-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := servicetest.FreeAddr(t)
	c := dashboardCmd(t, "--addr", addr, "--auth-token-file", tokenFile, "--postgres-url", pool.Config().ConnString(),
		"--brokers", strings.Join(stacktest.Brokers(t), ","), "--decisions-topic", stacktest.Topic(t, stacktest.Brokers(t), 1))
	ctx, cancel := context.WithCancel(context.Background())
	var log lockedBuffer
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, slog.New(slog.NewTextHandler(&log, nil))) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dashboard: %v", err)
		}
	})
	stacktest.WaitFor(t, "the dashboard started", time.Minute, func() bool { return strings.Contains(log.String(), "dashboard started") })
	get := func(token string) (int, string) {
		t.Helper()
		r, err := http.NewRequest(http.MethodGet, "http://"+addr+"/api/summary", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d %.80q, want 401", code, body)
	}
	if code, body := get("dashboard-token-0123456789"); code != http.StatusOK || !strings.Contains(body, `"action":"visit"`) {
		t.Errorf("with the token: %d %.80q, want 200 and the summary", code, body)
	}
}
