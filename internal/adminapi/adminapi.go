// Package adminapi is the wire form of floodgate's operator controls — the
// requests and results of inspect, ban, unban and reset — and Client, which
// runs them through a limiter's admin endpoints (/v1/admin/...). It imports
// no Redis or Kafka client: an operator's tools need neither, only the
// admin URL and a token. Package operator serves these endpoints and runs
// the same requests on the live store directly.
package adminapi

import (
	"time"

	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// Request settings of the admin endpoints travel as header fields: every
// query parameter but "action" names a kind, as on /v1/check.
const (
	HeaderRule    = "Floodgate-Rule"    // unban: only this rule's records
	HeaderFor     = "Floodgate-For"     // ban: how long ("1h", "30m", "90s", "2d")
	HeaderMessage = "Floodgate-Message" // ban: what the subject is told
)

// Request names an action's subjects and, for writes, its settings.
type Request struct {
	Action   string
	Subjects []limitapi.Subject
	// Operator is who acts, recorded in the audit. Required for writes.
	Operator string
	// Rule restricts an unban to that rule's records.
	Rule string
	// For is how long a ban lasts (1s to 366 days); Message what the banned
	// subject is told (default: the limiter's).
	For     time.Duration
	Message string
}

// Result tells what a write did.
type Result struct {
	Op       string          `json:"op"` // ban, unban or reset
	Action   string          `json:"action"`
	Operator string          `json:"operator"`
	At       time.Time       `json:"at"`
	Rule     string          `json:"rule,omitempty"`
	Until    *time.Time      `json:"until,omitempty"`
	Message  string          `json:"message,omitempty"`
	Subjects []SubjectResult `json:"subjects"`
	// AppliedHere is set by a limiter's admin endpoint: whether that
	// limiter's memory applied every change within its wait (2 s).
	AppliedHere *bool `json:"applied_here,omitempty"`
}

// SubjectResult is what a write did to one subject.
type SubjectResult struct {
	Kind      string   `json:"kind"`
	Subject   string   `json:"subject"`
	Partition int      `json:"partition"`
	Seq       int64    `json:"seq"`   // its change entry's sequence number in the partition
	Entry     string   `json:"entry"` // its change entry's id
	Cleared   []string `json:"cleared,omitempty"`
	// DeletedKeys counts the counter keys a reset deleted.
	DeletedKeys int64 `json:"deleted_keys,omitempty"`
	// Offset is a reset's boundary: the live group's next offset in the
	// partition when it ran; events from it on are counted afresh.
	Offset *int64 `json:"offset,omitempty"`
}

// Inspection is what an inspect found: every record of the subjects, their
// exact counts, and what a check would answer now, from memory and from
// Redis, with why.
type Inspection struct {
	Action   string              `json:"action"`
	At       time.Time           `json:"at"`
	Subjects []SubjectInspection `json:"subjects"`
	// Memory is the answer of a check (what applications get); Exact that
	// of a check with exact counts read in Redis.
	Memory CheckView `json:"memory"`
	Exact  CheckView `json:"exact"`
}

// SubjectInspection is one subject's records and counts.
type SubjectInspection struct {
	Kind      string `json:"kind"`
	Subject   string `json:"subject"`
	Partition int    `json:"partition"`
	// Rules are the rules of the action and kind with the exact count of
	// every window (from the exact check).
	Rules  []RuleView `json:"rules"`
	Deny   *DenyView  `json:"deny,omitempty"`
	Shadow *DenyView  `json:"shadow,omitempty"`
	Ban    *BanView   `json:"ban,omitempty"`
	// State is the decision state limiters answer from, as Redis holds it.
	State *StateView `json:"state,omitempty"`
}

// RuleView is one matching rule.
type RuleView struct {
	Rule        string `json:"rule"`
	Shadow      bool   `json:"shadow,omitempty"`
	Strict      bool   `json:"strict,omitempty"`
	Allowlisted bool   `json:"allowlisted,omitempty"`
	Distinct    string `json:"distinct,omitempty"` // the attr kind whose distinct values the limits count
	// Override names what gives the subject other counts than the rule's
	// ("plan gold: scale 10", "k_1: limits 50/1m"); empty when none does.
	Override string      `json:"override,omitempty"`
	Limits   []LimitView `json:"limits"`
}

// LimitView is one window's exact count; for a bucket rule (Rate set),
// Limit is the burst, Count the tokens used and Window the time an empty
// bucket takes to refill.
type LimitView struct {
	Rate       string `json:"rate,omitempty"`
	Limit      int64  `json:"limit"`
	Window     string `json:"window"`
	Count      int64  `json:"count"`
	Remaining  int64  `json:"remaining"`
	Exceeded   bool   `json:"exceeded,omitempty"`
	RetryAfter int64  `json:"retry_after,omitempty"` // seconds until one more fits, when exceeded
}

// DenyView is a deny or shadow record.
type DenyView struct {
	Rule       string     `json:"rule"`
	Rate       string     `json:"rate,omitempty"` // a bucket rule's record: limit is the burst
	Limit      int64      `json:"limit"`
	Window     string     `json:"window"`
	Count      int64      `json:"count"`
	Since      *time.Time `json:"since,omitempty"`
	Until      time.Time  `json:"until"`
	RetryAfter int64      `json:"retry_after"`
	Message    string     `json:"message,omitempty"`
}

// BanView is a ban in force.
type BanView struct {
	Operator   string    `json:"operator"`
	Since      time.Time `json:"since"`
	Until      time.Time `json:"until"`
	RetryAfter int64     `json:"retry_after"`
	Message    string    `json:"message,omitempty"`
}

// StateView is a subject's decision state.
type StateView struct {
	At     time.Time        `json:"at"`
	Limits []StateLimitView `json:"limits"`
}

// StateLimitView is one near limit of a decision state.
type StateLimitView struct {
	Rule   string     `json:"rule"`
	Limit  int64      `json:"limit"`
	Window string     `json:"window"`
	Count  int64      `json:"count"`
	Until  *time.Time `json:"until,omitempty"`
}

// CheckView is a check's answer and why.
type CheckView struct {
	Allowed  bool                 `json:"allowed"`
	Degraded bool                 `json:"degraded,omitempty"`
	Why      []string             `json:"why"`
	Result   limitapi.CheckResult `json:"result"`
}
