package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
)

// ListenFlags put a process's listeners behind TLS, optionally
// requiring client certificates (mTLS, as meshes use for Envoy → RLS).
// The files are read again when they change (cert-manager rotations).
type ListenFlags struct {
	TLSCert     string `name:"tls-cert" env:"FLOODGATE_TLS_CERT" help:"PEM certificate (chain) the listeners serve; with --tls-key, they speak TLS only. Reloaded when the file changes."`
	TLSKey      string `name:"tls-key" env:"FLOODGATE_TLS_KEY" help:"PEM key of --tls-cert."`
	TLSClientCA string `name:"tls-client-ca" env:"FLOODGATE_TLS_CLIENT_CA" help:"PEM CA(s): require every client to present a certificate signed by them (mTLS)."`
}

// ServerTLS is the listeners' TLS configuration, nil when not configured.
func (f *ListenFlags) ServerTLS(logger *slog.Logger) (*tls.Config, error) {
	files := ServerFiles{Cert: f.TLSCert, Key: f.TLSKey, ClientCA: f.TLSClientCA}
	if !files.Enabled() {
		if f.TLSClientCA != "" {
			return nil, errors.New("--tls-client-ca needs --tls-cert and --tls-key")
		}
		return nil, nil
	}
	cfg, err := Server(files, logger, "h2", "http/1.1")
	if err != nil {
		return nil, fmt.Errorf("listener %w", err)
	}
	return cfg, nil
}

// BeyondLoopback says whether addr listens on more than loopback (an
// empty host or a wildcard is every interface).
func BeyondLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true
	}
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

// Explain is a short cause for a failed connection or login, to
// precede the error itself ("" when there is nothing to add).
func Explain(err error, tlsOn bool, caFlag, tlsFlag string) string {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		recHeader tls.RecordHeaderError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &unknownCA):
		return "TLS: the server's certificate is not signed by a trusted CA (set " + caFlag + "): "
	case errors.As(err, &hostname):
		return "TLS: the server's certificate is not for this address: "
	case errors.As(err, &recHeader) || strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "TLS handshake answered by something that does not speak TLS (a plaintext port?): "
	case strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "invalid username-password"):
		return "authentication failed: wrong username or password: "
	case strings.Contains(msg, "NOAUTH"):
		return "authentication required: set a username and password: "
	case !tlsOn && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || strings.Contains(msg, "connection reset")):
		return "the server closed the connection (is it a TLS port? set " + tlsFlag + "): "
	}
	return ""
}
