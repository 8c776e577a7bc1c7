package decide_test

import (
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/floodgate-dev/floodgate/internal/decide"
)

// advertisedStreams is the SETTINGS_MAX_CONCURRENT_STREAMS an HTTP/2
// server without TLS announces in its first frame; ok false when it
// announces none (no bound).
func advertisedStreams(t *testing.T, addr string) (n uint32, ok bool) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatalf("%s: first frame: %v", addr, err)
	}
	sf, isSettings := f.(*http2.SettingsFrame)
	if !isSettings {
		t.Fatalf("%s: first frame %v, want SETTINGS", addr, f)
	}
	return sf.Value(http2.SettingMaxConcurrentStreams)
}

// Both listeners bound the calls in flight on one connection: the RLS
// server (gRPC's default is no bound) and the HTTP one (Connect/gRPC), 250
// unless configured.
func TestServersBoundConcurrentStreams(t *testing.T) {
	for _, tc := range []struct {
		set, want uint32
	}{{0, decide.DefaultMaxConcurrentStreams}, {7, 7}} {
		srv, _ := healthServer(t, func(c *decide.ServerConfig) { c.MaxConcurrentStreams = tc.set })
		for _, addr := range []string{srv.RLSAddr(), srv.HTTPAddr()} {
			if n, ok := advertisedStreams(t, addr); !ok || n != tc.want {
				t.Errorf("MaxConcurrentStreams %d: %s announces %d (set %v), want %d", tc.set, addr, n, ok, tc.want)
			}
		}
	}
}
