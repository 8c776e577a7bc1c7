package limitapi

import (
	"errors"
	"time"
)

// ErrRefused is what an error of a request the limiter refused as invalid
// matches (errors.Is): HTTP 400, InvalidArgument. The request is at fault,
// not the limiter, so no failure mode applies to it: a caller that let it
// through would let an attacker who makes requests invalid through. The
// limiter refuses only when none of the request's valid subjects is denied
// (docs/limiter.md).
var ErrRefused = errors.New("limiter refused the request as invalid")

// Subject is one feature of a request: its kind ("ip") and value.
type Subject struct {
	Kind, Subject string
}

// Request asks about an action happening now to some subjects.
type Request struct {
	Action   string
	Subjects []Subject
	// N is how many events Take counts; 0 means 1. Check ignores it.
	N int64
	// ID is the event id Take publishes; empty means new random ids.
	ID string
	// Exact makes a Check read the subjects' windows in Redis (exact counts
	// for every limit, one round trip per slot) instead of answering from
	// the limiter's memory. Take is always exact.
	Exact bool
}

// Limit is the state of one limit of one matching rule for one subject.
type Limit struct {
	Rule, Kind, Subject string
	Limit               int64         // allowed events per window
	Window              time.Duration // sliding window
	// Count is the events in the window now, as far as the aggregator has
	// written them (0 when Estimated): a write-back aggregator writes it
	// with its checkpoint, up to that interval after the events, unless it
	// changes whether the subject is denied; for a subject that stays
	// denied, Count and ResetAfter are written up to --deny-refresh apart
	// (ResetAfter then earlier than the truth, never later).
	Count int64
	// Remaining is max(Limit-Count, 0): never more than what was left as
	// of Count. When
	// Estimated, a guaranteed lower bound: the subject is under half the
	// limit, so at least Limit - (ceil(Limit/2) - 1) are left.
	Remaining int64
	// ResetAfter is when one more event fits again if Exceeded; otherwise
	// an upper bound of when the whole quota is back (Window when Count > 0).
	ResetAfter  time.Duration
	Shadow      bool // the rule never denies
	Strict      bool // the rule counts through Take
	Exceeded    bool // one more event (N for Take) would go over, or a deny record says so
	Allowlisted bool // the subject is on the rule's allowlist: never denied
	// Estimated: answered from memory for a subject under half the limit,
	// whose exact count the limiter does not hold (ask with Request.Exact).
	Estimated bool
	// Rate is set for a bucket rule ("10/1s"): Limit is then its burst,
	// Count the tokens used, and Window the time an empty bucket takes to
	// refill.
	Rate string
	// Override names what gave the subject this Limit instead of the
	// rule's ("plan gold", "subject"; the rules file's overrides), "" when
	// the rule did.
	Override string
}

// Denial says why a request is (or for a shadow rule, would be) denied.
type Denial struct {
	Rule, Kind, Subject string
	Limit               int64
	Window              time.Duration
	Count               int64
	Message             string
	Until               time.Time     // when one more event fits again
	RetryAfter          time.Duration // Until minus the decision time
	Shadow              bool
	Rate                string // a bucket rule's rate, as in Limit
	// Banned: an operator banned the subject until Until (no rule; Message
	// is the ban's). Not carried over gRPC/Connect, where a ban is a
	// denial without a rule.
	Banned bool
}

// Decision answers a Request.
type Decision struct {
	Allowed bool
	// Denial is set when denied: the enforced denial with the longest
	// retry. In closed failure mode it names no rule.
	Denial        *Denial
	Limits        []Limit  // every limit of every matching rule
	ShadowDenials []Denial // shadow rules that would deny
	Degraded      bool     // Redis failed or timed out: the failure mode answered
	Counted       bool     // Take counted strict subjects in Redis
	Time          time.Time
}

// RetryAfter returns the denial's retry time, 0 when allowed.
func (d Decision) RetryAfter() time.Duration {
	if d.Denial == nil {
		return 0
	}
	return d.Denial.RetryAfter
}

// RetrySeconds rounds a retry time up to whole seconds, at least 1 when
// positive (the Retry-After and RateLimit "t" values).
func RetrySeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
