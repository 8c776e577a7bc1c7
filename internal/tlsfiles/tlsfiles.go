// Package tlsfiles builds TLS configurations from PEM files, the way
// Kubernetes mounts them: a client's (CA, optional client certificate) for
// Redis, Kafka and the like, and a server's (certificate, optional client
// CA for mTLS) for floodgate's listeners. Certificates are read again when
// their files change (cert-manager rotates them in place), so a rotation
// needs no restart.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// ClientFiles are a client's TLS settings. CA empty trusts the system
// roots; Cert and Key (both or neither) are the client certificate.
type ClientFiles struct {
	CA, Cert, Key string
	ServerName    string // overrides the name the server certificate must carry
}

// Client returns a client configuration; every file is read now, so a
// missing or bad file is an error at start, naming the file.
func Client(f ClientFiles) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		pool, err := certPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("tls client certificate: give both the certificate and the key file, or neither")
	}
	if f.Cert != "" {
		kp, err := newKeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get() }
	}
	return cfg, nil
}

// ServerFiles are a listener's TLS settings. ClientCA set requires every
// client to present a certificate signed by it (mTLS).
type ServerFiles struct {
	Cert, Key string
	ClientCA  string
}

// Enabled says whether TLS is configured at all.
func (f ServerFiles) Enabled() bool { return f.Cert != "" || f.Key != "" }

// Server returns a server configuration that serves the certificate (and
// trusts the client CA) read from the files as they are at each handshake,
// checked at most once a second. A file that turns bad is logged and the
// last good one kept. nextProtos are the ALPN protocols offered (h2 for
// gRPC).
func Server(f ServerFiles, logger *slog.Logger, nextProtos ...string) (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("tls: give both the certificate and the key file")
	}
	kp, err := newKeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, err
	}
	kp.logger = logger
	var ca *caFile
	if f.ClientCA != "" {
		if ca, err = newCAFile(f.ClientCA); err != nil {
			return nil, err
		}
		ca.logger = logger
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cert, err := kp.get()
		if err != nil {
			return nil, err
		}
		c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos, Certificates: []tls.Certificate{*cert}}
		if ca != nil {
			c.ClientCAs = ca.get()
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
		return c, nil
	}
	return base, nil
}

func certPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// stamp is what says a file changed: its modification time and size.
type stamp struct {
	mod  time.Time
	size int64
}

func stat(path string) (stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	return stamp{fi.ModTime(), fi.Size()}, nil
}

// keyPair is a certificate and key read again when either file changes.
type keyPair struct {
	cert, key string
	logger    *slog.Logger

	mu          sync.Mutex
	checked     time.Time
	certS, keyS stamp
	current     *tls.Certificate
}

func newKeyPair(cert, key string) (*keyPair, error) {
	kp := &keyPair{cert: cert, key: key}
	if err := kp.load(); err != nil {
		return nil, err
	}
	return kp, nil
}

func (kp *keyPair) load() error {
	cs, err := stat(kp.cert)
	if err != nil {
		return fmt.Errorf("tls certificate: %w", err)
	}
	ks, err := stat(kp.key)
	if err != nil {
		return fmt.Errorf("tls key: %w", err)
	}
	if kp.current != nil && cs == kp.certS && ks == kp.keyS {
		return nil
	}
	c, err := tls.LoadX509KeyPair(kp.cert, kp.key)
	if err != nil {
		// The message names the files, never their contents.
		return fmt.Errorf("tls certificate %s and key %s: %w", kp.cert, kp.key, err)
	}
	kp.current, kp.certS, kp.keyS = &c, cs, ks
	return nil
}

func (kp *keyPair) get() (*tls.Certificate, error) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if now := time.Now(); now.Sub(kp.checked) >= time.Second {
		kp.checked = now
		prev := kp.current
		if err := kp.load(); err != nil {
			if kp.logger != nil {
				kp.logger.Error("tls certificate reload failed; serving the previous one", "cert", kp.cert, "err", err)
			}
		} else if kp.current != prev && kp.logger != nil {
			kp.logger.Info("tls certificate reloaded", "cert", kp.cert)
		}
	}
	return kp.current, nil
}

// caFile is a CA bundle read again when it changes.
type caFile struct {
	path   string
	logger *slog.Logger

	mu      sync.Mutex
	checked time.Time
	s       stamp
	pool    *x509.CertPool
}

func newCAFile(path string) (*caFile, error) {
	c := &caFile{path: path}
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *caFile) load() error {
	s, err := stat(c.path)
	if err != nil {
		return fmt.Errorf("tls client CA: %w", err)
	}
	if c.pool != nil && s == c.s {
		return nil
	}
	pool, err := certPool(c.path)
	if err != nil {
		return err
	}
	c.pool, c.s = pool, s
	return nil
}

func (c *caFile) get() *x509.CertPool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.checked) >= time.Second {
		c.checked = now
		if err := c.load(); err != nil && c.logger != nil {
			c.logger.Error("tls client CA reload failed; trusting the previous one", "ca", c.path, "err", err)
		}
	}
	return c.pool
}
