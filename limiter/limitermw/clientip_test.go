package limitermw_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/limiter/limitapi"
	"github.com/floodgate-dev/floodgate/limiter/limitermw"
)

func TestProxiesClientIP(t *testing.T) {
	proxies, err := limitermw.ParseProxies("10.0.0.0/8", "192.0.2.10", "2001:db8::/32")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, peer string
		xff        []string // X-Forwarded-For fields, in order
		realIP     string
		proxies    limitermw.Proxies
		want       string
	}{
		{"no proxies: the peer, whatever the header says", "203.0.113.9:5000", []string{"198.51.100.1"}, "", nil, "203.0.113.9"},
		{"an untrusted peer names nobody", "203.0.113.9:5000", []string{"198.51.100.1"}, "", proxies, "203.0.113.9"},
		{"a trusted proxy names the client", "10.1.2.3:5000", []string{"198.51.100.1"}, "", proxies, "198.51.100.1"},
		{"what the client wrote stands left of it", "10.1.2.3:5000", []string{"6.6.6.6, 198.51.100.1"}, "", proxies, "198.51.100.1"},
		{"past a chain of proxies", "10.1.2.3:5000", []string{"198.51.100.1, 192.0.2.10, 10.9.9.9"}, "", proxies, "198.51.100.1"},
		{"several fields are one list", "10.1.2.3:5000", []string{"6.6.6.6", "198.51.100.1, 10.9.9.9"}, "", proxies, "198.51.100.1"},
		{"every hop a proxy: the peer", "10.1.2.3:5000", []string{"10.5.5.5"}, "", proxies, "10.1.2.3"},
		{"an unparsable hop before any client: the peer", "10.1.2.3:5000", []string{"198.51.100.1, not-an-ip"}, "", proxies, "10.1.2.3"},
		{"no header: the peer", "10.1.2.3:5000", nil, "", proxies, "10.1.2.3"},
		{"X-Real-IP is never read", "10.1.2.3:5000", nil, "6.6.6.6", proxies, "10.1.2.3"},
		{"IPv4-mapped addresses in canonical form", "[::ffff:10.1.2.3]:5000", []string{"::ffff:198.51.100.1"}, "", proxies, "198.51.100.1"},
		{"IPv6 proxies", "[2001:db8::1]:5000", []string{"2001:db9::7"}, "", proxies, "2001:db9::7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.peer
			for _, f := range tc.xff {
				r.Header.Add("X-Forwarded-For", f)
			}
			if tc.realIP != "" {
				r.Header.Set("X-Real-IP", tc.realIP)
			}
			if got := tc.proxies.ClientIP(r); got != tc.want {
				t.Errorf("ClientIP = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestParseProxies(t *testing.T) {
	p, err := limitermw.ParseProxies(" 10.0.0.0/8 ", "", "::ffff:192.0.2.1", "10.1.2.3/8")
	if err != nil || len(p) != 3 || p[1].String() != "192.0.2.1/32" || p[2].String() != "10.0.0.0/8" {
		t.Fatalf("ParseProxies = %v, %v", p, err)
	}
	if _, err := limitermw.ParseProxies("10.0.0.0/8", "proxy.internal"); err == nil || !strings.Contains(err.Error(), "proxy.internal") {
		t.Fatalf("a name: %v, want an error naming it", err)
	}
}

// The middleware's default subject is the client as the trusted proxies
// name it.
func TestDefaultSubjectBehindProxies(t *testing.T) {
	proxies, err := limitermw.ParseProxies("10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	var asked []limitapi.Subject
	mw, err := limitermw.New(limitermw.Config{Checker: checkerFunc(func(_ context.Context, req limitapi.Request) (limitapi.Decision, error) {
		asked = req.Subjects
		return limitapi.Decision{Allowed: true}, nil
	}), Action: "visit", TrustedProxies: proxies})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.7:4000"
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.1")
	mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(httptest.NewRecorder(), r)
	if len(asked) != 1 || asked[0] != (limitapi.Subject{Kind: "ip", Subject: "198.51.100.1"}) {
		t.Fatalf("asked about %v, want ip 198.51.100.1", asked)
	}
}

type checkerFunc func(context.Context, limitapi.Request) (limitapi.Decision, error)

func (f checkerFunc) Check(ctx context.Context, req limitapi.Request) (limitapi.Decision, error) {
	return f(ctx, req)
}
