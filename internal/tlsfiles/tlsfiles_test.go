package tlsfiles_test

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles/tlsfilestest"
)

func writeFile(t *testing.T, path string, b []byte) string {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serve accepts TLS connections with cfg, completing each handshake.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				_, _ = c.Write([]byte("ok"))
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// served returns the serial of the certificate the server presents.
func served(t *testing.T, addr string, cfg *tls.Config) (int64, error) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	buf := make([]byte, 2)
	if _, err := c.Read(buf); err != nil {
		return 0, err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

func TestServerReloadsRotatedCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := tlsfilestest.NewCA(t, "test CA")
	caPath := writeFile(t, filepath.Join(dir, "ca.pem"), ca.PEM)
	certPath, keyPath := ca.Issue(t, dir, "server", 1)
	var logs syncBuffer
	srv, err := tlsfiles.Server(tlsfiles.ServerFiles{Cert: certPath, Key: keyPath}, slog.New(slog.NewTextHandler(&logs, nil)), "h2")
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	client, err := tlsfiles.Client(tlsfiles.ClientFiles{CA: caPath})
	if err != nil {
		t.Fatal(err)
	}
	if serial, err := served(t, addr, client); err != nil || serial != 1 {
		t.Fatalf("first certificate: serial %d, %v", serial, err)
	}
	ca.Issue(t, dir, "server", 2) // the rotation
	stacktest.WaitFor(t, "the rotated certificate served", 30*time.Second, func() bool {
		serial, err := served(t, addr, client)
		return err == nil && serial == 2
	})

	// A half-written file keeps the last good certificate.
	writeFile(t, certPath, []byte("garbage"))
	stacktest.WaitFor(t, "the bad file noticed", 30*time.Second, func() bool {
		_, _ = served(t, addr, client)
		return strings.Contains(logs.String(), "tls certificate reload failed")
	})
	if serial, err := served(t, addr, client); err != nil || serial != 2 {
		t.Fatalf("after a bad file: serial %d, %v; want the last good one (2)", serial, err)
	}
}

func TestServerRequiresClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := tlsfilestest.NewCA(t, "test CA")
	caPath := writeFile(t, filepath.Join(dir, "ca.pem"), ca.PEM)
	certPath, keyPath := ca.Issue(t, dir, "server", 1)
	srv, err := tlsfiles.Server(tlsfiles.ServerFiles{Cert: certPath, Key: keyPath, ClientCA: caPath}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)

	anon, err := tlsfiles.Client(tlsfiles.ClientFiles{CA: caPath})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := served(t, addr, anon); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	other := tlsfilestest.NewCA(t, "other CA")
	oc, ok := other.Issue(t, dir, "stranger", 3)
	stranger, err := tlsfiles.Client(tlsfiles.ClientFiles{CA: caPath, Cert: oc, Key: ok})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := served(t, addr, stranger); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
	cc, ck := ca.Issue(t, dir, "client", 4)
	good, err := tlsfiles.Client(tlsfiles.ClientFiles{CA: caPath, Cert: cc, Key: ck})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := served(t, addr, good); err != nil {
		t.Fatalf("a client certificate of the CA: %v", err)
	}
}

func TestClientErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := tlsfiles.Client(tlsfiles.ClientFiles{CA: filepath.Join(dir, "missing.pem")}); err == nil || !strings.Contains(err.Error(), "CA file") {
		t.Errorf("missing CA: %v", err)
	}
	bad := writeFile(t, filepath.Join(dir, "bad.pem"), []byte("not pem"))
	if _, err := tlsfiles.Client(tlsfiles.ClientFiles{CA: bad}); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("bad CA: %v", err)
	}
	if _, err := tlsfiles.Client(tlsfiles.ClientFiles{Cert: bad}); err == nil {
		t.Error("a certificate without a key was accepted")
	}
	if _, err := tlsfiles.Server(tlsfiles.ServerFiles{Cert: bad, Key: bad}, nil); err == nil || strings.Contains(err.Error(), "not pem") {
		t.Errorf("bad server pair: %v (must not quote the file)", err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
