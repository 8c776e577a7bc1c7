package service

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/floodgate-dev/floodgate/limiter/limitermw"
)

// The client is the nearest X-Forwarded-For hop no trusted proxy wrote,
// else the peer: X-Real-IP, which a client can send through a proxy that
// does not set it, is never read.
func TestClientIPIgnoresXRealIP(t *testing.T) {
	s := &server{cfg: Config{TrustedProxies: limitermw.Proxies{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")}}}
	for _, tc := range []struct {
		name, peer, xff, realIP, want string
	}{
		{"untrusted peer", "198.51.100.1:5000", "203.0.113.9", "203.0.113.8", "198.51.100.1"},
		{"forwarded", "127.0.0.1:5000", "203.0.113.9, 198.51.100.2", "203.0.113.8", "198.51.100.2"},
		{"forwarded through two proxies", "127.0.0.1:5000", "198.51.100.3, 10.1.2.3", "", "198.51.100.3"},
		{"no X-Forwarded-For", "127.0.0.1:5000", "", "203.0.113.8", "127.0.0.1"},
		{"X-Forwarded-For unparsable", "127.0.0.1:5000", "not-an-address", "203.0.113.8", "127.0.0.1"},
		{"every hop trusted", "127.0.0.1:5000", "10.0.0.1", "203.0.113.8", "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/abc", nil)
			r.RemoteAddr = tc.peer
			if tc.xff != "" {
				r.Header.Set("X-Forwarded-For", tc.xff)
			}
			if tc.realIP != "" {
				r.Header.Set("X-Real-IP", tc.realIP)
			}
			if got := s.clientIP(r); got != tc.want {
				t.Errorf("client %s, want %s", got, tc.want)
			}
		})
	}
}
