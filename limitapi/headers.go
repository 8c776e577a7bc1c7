package limitapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"floodgate/rules"
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
	var pol, cur strings.Builder
	seen := map[string]bool{}
	add := func(name string, q, w, r, t int64) {
		if seen[name] {
			return
		}
		seen[name] = true
		if pol.Len() > 0 {
			pol.WriteString(", ")
			cur.WriteString(", ")
		}
		pol.WriteString(sfString(name))
		pol.WriteString(";q=")
		pol.WriteString(strconv.FormatInt(q, 10))
		pol.WriteString(";w=")
		pol.WriteString(strconv.FormatInt(w, 10))
		cur.WriteString(sfString(name))
		cur.WriteString(";r=")
		cur.WriteString(strconv.FormatInt(r, 10))
		cur.WriteString(";t=")
		cur.WriteString(strconv.FormatInt(t, 10))
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
	if pol.Len() > 0 {
		h.Set(HeaderRateLimitPolicy, pol.String())
		h.Set(HeaderRateLimit, cur.String())
	}
	if !d.Allowed {
		h.Set(HeaderRetryAfter, strconv.FormatInt(max(RetrySeconds(d.RetryAfter()), 1), 10))
	}
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
	return rule + "/" + kind + "/" + rules.FormatWindow(w)
}

// sfString writes s as a Structured Field String: printable ASCII in
// quotes, with '"' and '\' escaped; other bytes become '?'.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
