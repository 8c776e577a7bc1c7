package limitermw

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP returns the host of r.RemoteAddr: the client, when nothing
// stands between it and the app. Behind proxies, use Proxies.ClientIP.
func ClientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Proxies are the addresses allowed to name the client in X-Forwarded-For:
// the load balancers and reverse proxies in front of the app, and nothing a
// client can reach directly.
type Proxies []netip.Prefix

// ParseProxies reads proxies as CIDR prefixes ("10.0.0.0/8") or single
// addresses ("192.0.2.10").
func ParseProxies(specs ...string) (Proxies, error) {
	out := make(Proxies, 0, len(specs))
	for _, s := range specs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: want an address or a CIDR prefix", s)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// ClientIP returns the client's address: the peer's, unless the peer is
// one of p; then X-Forwarded-For read from the right (the hop nearest the
// app) past every address of p, and the first one that is not: the
// nearest hop no trusted proxy could have written for the client. Every
// address a client put in the header itself stands to the left of what
// the proxies appended, so a forged one is never reached. When the header
// names none (absent, every hop a proxy, or a hop that does not parse
// before an untrusted one) it is the peer's. X-Real-IP is never read: a
// proxy that does not set it passes on whatever the client sent. Addresses
// are in canonical form (an IPv4-mapped IPv6 address as IPv4).
func (p Proxies) ClientIP(r *http.Request) string {
	return p.Resolve(ClientIP(r), r.Header.Values("X-Forwarded-For")...)
}

// Resolve is ClientIP of a peer address (a host, without port) and the
// X-Forwarded-For fields that came with it, for servers that are not
// net/http's (gRPC metadata, say).
func (p Proxies) Resolve(host string, forwardedFor ...string) string {
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	peer = peer.Unmap().WithZone("")
	if !p.trusted(peer) {
		return peer.String()
	}
	for _, h := range hopsNearestFirst(forwardedFor) {
		a, err := netip.ParseAddr(strings.TrimSpace(h))
		if err != nil {
			break
		}
		if a = a.Unmap().WithZone(""); !p.trusted(a) {
			return a.String()
		}
	}
	return peer.String()
}

func (p Proxies) trusted(a netip.Addr) bool {
	for _, pre := range p {
		if pre.Contains(a) {
			return true
		}
	}
	return false
}

// hopsNearestFirst is every hop of the X-Forwarded-For fields, nearest
// first (several fields are one list, in order).
func hopsNearestFirst(fields []string) []string {
	var hops []string
	for _, f := range fields {
		hops = append(hops, strings.Split(f, ",")...)
	}
	for i, j := 0, len(hops)-1; i < j; i, j = i+1, j-1 {
		hops[i], hops[j] = hops[j], hops[i]
	}
	return hops
}
