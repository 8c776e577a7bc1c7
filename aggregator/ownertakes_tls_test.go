package aggregator

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-dev/floodgate/internal/tlsfiles"
	"github.com/floodgate-dev/floodgate/internal/tlsfiles/tlsfilestest"
)

// With --takes-tls-client-ca the peer endpoint requires a client
// certificate: a member forwarding a take presents its own, and is let in.
// Before, the forwarding client presented none, and every forwarded take
// failed its handshake.
func TestPeerClientPresentsTheMembersCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := tlsfilestest.NewCA(t, "members")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	cert, key := ca.Issue(t, dir, "member", 2)
	c := &Config{OwnerTakesFlags: OwnerTakesFlags{TakesTLSCert: cert, TakesTLSKey: key, TakesTLSClientCA: caFile, TakesPeerCA: caFile}}

	// The peer endpoint as a member serves it.
	stc, err := (&tlsfiles.ListenFlags{TLSCert: cert, TLSKey: key, TLSClientCA: caFile}).ServerTLS(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	peer := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "no client certificate", http.StatusForbidden)
			return
		}
		_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	peer.TLS = stc
	peer.StartTLS()
	defer peer.Close()

	tc, err := c.peerClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	resp, err := client.Get(peer.URL)
	if err != nil {
		t.Fatalf("a member reaching a peer that requires client certificates: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "member" {
		t.Fatalf("peer answered %s %q, want 200 naming the member's certificate", resp.Status, body)
	}

	// Without --takes-tls-client-ca the member presents nothing (the
	// endpoint asks for nothing).
	c.TakesTLSClientCA = ""
	if tc, err = c.peerClientTLS(); err != nil || tc.GetClientCertificate != nil {
		t.Fatalf("without a client CA: %v, client certificate %v; want none", err, tc.GetClientCertificate != nil)
	}
}
