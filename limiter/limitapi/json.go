package limitapi

import "github.com/floodgate-dev/floodgate/internal/timespan"

// HeaderDenyStatus lets a caller choose the status of a denial on the HTTP
// surface: 429 (default), 403 or 401. nginx's auth_request turns any status
// but 2xx, 401 and 403 into a 500, so an nginx location sets it to 403.
const HeaderDenyStatus = "Floodgate-Deny-Status"

// Request header fields of the HTTP surface. Every query parameter but
// "action" names a kind, so settings of the request travel as headers,
// which no kind can collide with.
const (
	// HeaderN asks /v1/take for n slots (default 1).
	HeaderN = "Floodgate-N"
	// HeaderEventID is the event id /v1/take publishes (default: new ids).
	HeaderEventID = "Floodgate-Event-Id"
	// HeaderExact set to "1" makes /v1/check read exact counts in Redis
	// instead of answering from the limiter's memory.
	HeaderExact = "Floodgate-Exact"
)

// CheckResult is the JSON body of /v1/check and /v1/take: the decision,
// with the denial's fields at the top level so that a proxy can show
// "message" as it is. Windows are in the rules file syntax ("1m"), times in
// whole seconds.
type CheckResult struct {
	Allowed       bool         `json:"allowed"`
	Message       string       `json:"message,omitempty"`
	Rule          string       `json:"rule,omitempty"`
	Kind          string       `json:"kind,omitempty"`
	Subject       string       `json:"subject,omitempty"`
	Limit         int64        `json:"limit,omitempty"`
	Window        string       `json:"window,omitempty"`
	Rate          string       `json:"rate,omitempty"`
	Count         int64        `json:"count,omitempty"`
	RetryAfter    int64        `json:"retry_after,omitempty"`
	Banned        bool         `json:"banned,omitempty"` // an operator's ban denies (no rule)
	Degraded      bool         `json:"degraded,omitempty"`
	Counted       bool         `json:"counted,omitempty"`
	Limits        []LimitJSON  `json:"limits,omitempty"`
	ShadowDenials []DenialJSON `json:"shadow_denials,omitempty"`
	Error         string       `json:"error,omitempty"`
}

// LimitJSON is a Limit in CheckResult.
type LimitJSON struct {
	Rule        string `json:"rule"`
	Kind        string `json:"kind"`
	Subject     string `json:"subject"`
	Limit       int64  `json:"limit"`
	Window      string `json:"window"`
	Count       int64  `json:"count"`
	Remaining   int64  `json:"remaining"`
	ResetAfter  int64  `json:"reset_after"`
	Shadow      bool   `json:"shadow,omitempty"`
	Strict      bool   `json:"strict,omitempty"`
	Exceeded    bool   `json:"exceeded,omitempty"`
	Allowlisted bool   `json:"allowlisted,omitempty"`
	// Estimated: count not known (under half the limit), remaining a lower
	// bound.
	Estimated bool `json:"estimated,omitempty"`
	// Rate of a bucket rule ("10/1s"); limit is its burst, window the
	// time it takes to refill.
	Rate string `json:"rate,omitempty"`
	// Override names what gave the subject this limit ("plan gold",
	// "subject"); omitted when the rule did.
	Override string `json:"override,omitempty"`
}

// DenialJSON is a shadow denial in CheckResult.
type DenialJSON struct {
	Rule       string `json:"rule"`
	Kind       string `json:"kind"`
	Subject    string `json:"subject"`
	Limit      int64  `json:"limit"`
	Window     string `json:"window"`
	Count      int64  `json:"count"`
	Message    string `json:"message,omitempty"`
	RetryAfter int64  `json:"retry_after"`
	Rate       string `json:"rate,omitempty"`
}

// Result converts a decision to its JSON body.
func Result(d Decision) CheckResult {
	r := CheckResult{Allowed: d.Allowed, Degraded: d.Degraded, Counted: d.Counted}
	if den := d.Denial; den != nil {
		r.Message, r.Rule, r.Kind, r.Subject, r.Banned = den.Message, den.Rule, den.Kind, den.Subject, den.Banned
		r.Limit, r.Count, r.RetryAfter, r.Rate = den.Limit, den.Count, max(RetrySeconds(den.RetryAfter), 1), den.Rate
		if den.Window > 0 {
			r.Window = timespan.FormatWindow(den.Window)
		}
	}
	for _, l := range d.Limits {
		r.Limits = append(r.Limits, LimitJSON{
			Rule: l.Rule, Kind: l.Kind, Subject: l.Subject, Limit: l.Limit, Window: timespan.FormatWindow(l.Window),
			Count: l.Count, Remaining: l.Remaining, ResetAfter: RetrySeconds(l.ResetAfter),
			Shadow: l.Shadow, Strict: l.Strict, Exceeded: l.Exceeded, Allowlisted: l.Allowlisted, Estimated: l.Estimated, Rate: l.Rate,
			Override: l.Override,
		})
	}
	for _, s := range d.ShadowDenials {
		r.ShadowDenials = append(r.ShadowDenials, DenialJSON{
			Rule: s.Rule, Kind: s.Kind, Subject: s.Subject, Limit: s.Limit, Window: timespan.FormatWindow(s.Window),
			Count: s.Count, Message: s.Message, RetryAfter: RetrySeconds(s.RetryAfter), Rate: s.Rate,
		})
	}
	return r
}
