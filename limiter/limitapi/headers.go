package limitapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/internal/timespan"
)

// Header field names of draft-ietf-httpapi-ratelimit-headers (-09/-10).
const (
	HeaderRateLimitPolicy = "RateLimit-Policy"
	HeaderRateLimit       = "RateLimit"
	HeaderRetryAfter      = "Retry-After"
)

// SetHeaders writes the rate limit header fields of d into h:
//
//	RateLimit-Policy: "login-failed/ip/1m";q=5;w=60, "login-failed/ip/1h";q=10;w=3600
//	RateLimit: "login-failed/ip/1m";r=0;t=42, "login-failed/ip/1h";r=4;t=3600
//	Retry-After: 42                                   (denied only)
//
// Both fields are Structured Field Lists (RFC 9651) as in
// draft-ietf-httpapi-ratelimit-headers: one item per enforced limit (shadow
// rules and allowlisted subjects are left out), named
// "<rule>/<kind>/<window>", with q the quota and w the window in seconds,
// r the remaining quota and t the seconds until it resets (for an
// exhausted limit, until one more request fits; otherwise an upper bound).
// A denial answered from the cache carries only the denying limit.
func SetHeaders(h http.Header, d Decision) {
	pol, cur, retry := Fields(d)
	if pol != "" {
		h.Set(HeaderRateLimitPolicy, pol)
		h.Set(HeaderRateLimit, cur)
	}
	if retry != "" {
		h.Set(HeaderRetryAfter, retry)
	}
}

// Fields returns the values SetHeaders writes, "" for a field it leaves
// out; Envoy RLS answers carry them as response headers without an
// http.Header in between. Built in one pass without a map: a denied
// lookup answered from memory spent a tenth of its CPU here.
func Fields(d Decision) (policyField, rateLimitField, retryAfter string) {
	var pol, cur, name []byte
	var seen []string // a handful of limits: a scan beats a map
	add := func(id string, q, w, r, t int64) {
		for _, s := range seen {
			if s == id {
				return
			}
		}
		seen = append(seen, id)
		if len(pol) > 0 {
			pol = append(pol, ", "...)
			cur = append(cur, ", "...)
		}
		name = appendSFString(name[:0], id)
		pol = append(pol, name...)
		pol = append(pol, ";q="...)
		pol = strconv.AppendInt(pol, q, 10)
		pol = append(pol, ";w="...)
		pol = strconv.AppendInt(pol, w, 10)
		cur = append(cur, name...)
		cur = append(cur, ";r="...)
		cur = strconv.AppendInt(cur, r, 10)
		cur = append(cur, ";t="...)
		cur = strconv.AppendInt(cur, t, 10)
	}
	if den := d.Denial; den != nil && den.Rule != "" {
		add(policy(den.Rule, den.Kind, den.Window, den.Rate), den.Limit, RetrySeconds(den.Window), 0, RetrySeconds(den.RetryAfter))
	}
	for _, l := range d.Limits {
		if l.Shadow || l.Allowlisted {
			continue
		}
		r := l.Remaining
		if l.Exceeded {
			r = 0
		}
		add(policy(l.Rule, l.Kind, l.Window, l.Rate), l.Limit, RetrySeconds(l.Window), r, RetrySeconds(l.ResetAfter))
	}
	if !d.Allowed {
		retryAfter = strconv.FormatInt(max(RetrySeconds(d.RetryAfter()), 1), 10)
	}
	return string(pol), string(cur), retryAfter
}

// policy names a limit, or a bucket ("<rule>/<kind>/bucket").
func policy(rule, kind string, w time.Duration, rate string) string {
	if rate != "" {
		return rule + "/" + kind + "/bucket"
	}
	return PolicyName(rule, kind, w)
}

// PolicyName names a limit in the RateLimit fields and Envoy answers:
// "<rule>/<kind>/<window>".
func PolicyName(rule, kind string, w time.Duration) string {
	return rule + "/" + kind + "/" + timespan.FormatWindow(w)
}

// appendSFString appends s as a Structured Field String: printable ASCII
// in quotes, with '"' and '\' escaped; other bytes become '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
