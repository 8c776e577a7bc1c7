package window

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"floodgate/rules"
)

// Operator actions: an operator bans, unbans or resets one subject with one
// script run in its partition's slot, which writes one change entry (every
// limiter applies it from the stream, the relay publishes its audit record)
// in the same run. docs/operations.md is the runbook.

// bansSuffix names a slot's hash of bans: field -> Ban JSON.
const bansSuffix = ":@bans"

// Bans returns the key of a partition's ban hash.
func (k Keys) Bans(partition int) string { return k.Slot(partition) + bansSuffix }

// Ban is an operator's ban of a subject: every check, exact check and
// strict take of the subject is denied until Until, whatever its counts
// (allowlists included).
type Ban struct {
	Until    time.Time
	Message  string
	Operator string
	Since    time.Time
}

// banWire is the JSON of a ban in the slot's ban hash and change entries:
//
//	{"until":<unix ms>,"message":"...","operator":"alice","since":<unix ms>}
type banWire struct {
	Until    int64  `json:"until"`
	Message  string `json:"message"`
	Operator string `json:"operator"`
	Since    int64  `json:"since"`
}

// ParseBan decodes a ban.
func ParseBan(data []byte) (*Ban, error) {
	var w banWire
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("ban: %w", err)
	}
	if w.Until <= 0 {
		return nil, errors.New("ban: no until")
	}
	return &Ban{Until: time.UnixMilli(w.Until).UTC(), Message: w.Message, Operator: w.Operator, Since: time.UnixMilli(w.Since).UTC()}, nil
}

// MarshalJSON writes the ban format (see ParseBan).
func (b Ban) MarshalJSON() ([]byte, error) {
	return json.Marshal(banWire{Until: b.Until.UnixMilli(), Message: b.Message, Operator: b.Operator, Since: b.Since.UnixMilli()})
}

// InForce reports whether the ban denies at now.
func (b *Ban) InForce(now time.Time) bool { return b != nil && now.Before(b.Until) }

// BanChange is a subject's new ban in a change entry; Ban nil: it has none
// any more (unbanned or reset).
type BanChange struct {
	Subject Subject
	Ban     *Ban
}

// AdminOp is an operator action.
type AdminOp string

// The operator actions; docs/operations.md says what each does.
const (
	OpBan   AdminOp = "ban"
	OpUnban AdminOp = "unban"
	OpReset AdminOp = "reset"
)

// resetAhead is how far past now a reset deletes buckets: events stamped
// ahead of the operator's clock (the aggregator accepts a future skew, 5s by
// default; limiters' clocks differ) are reset too.
const resetAhead = 5 * time.Minute

// AdminRequest is one operator action on one subject.
type AdminRequest struct {
	Op       AdminOp
	Subject  Subject
	Operator string // who acts: recorded in the ban and the audit record; required
	// Rule, for OpUnban, restricts it to the records of that rule (the
	// subject's ban, which belongs to no rule, stays). Empty: everything.
	Rule string
	// Until and Message, for OpBan: when the ban ends (after now) and what
	// denied requests are told.
	Until   time.Time
	Message string
	// MaxWindow, for OpReset, is the subject's longest rule window
	// (rules.Set.MaxWindowFor): the buckets any of its windows can still
	// read are deleted, with its token buckets' arrival times.
	MaxWindow time.Duration
	// Distinct, for OpReset, names the attr kinds of the subject's distinct
	// rules: their distinct sets are deleted.
	Distinct []string
	// Group and Topic, for OpReset, name the live consumer group whose next
	// offset in the subject's partition is recorded as the reset's
	// boundary: events from that offset on were not counted yet and are
	// counted into the fresh windows. Empty: not recorded.
	Group, Topic string
}

// AdminResult tells what an operator action did.
type AdminResult struct {
	Partition int
	// Seq and EntryID name the change entry written: a limiter whose state
	// holds Seq of the partition (limiter.State.Seq) applies the action.
	Seq     int64
	EntryID string
	// Cleared lists what an unban or reset removed: "deny", "shadow",
	// "ban", "state".
	Cleared []string
	// DeletedKeys is the number of counter keys a reset deleted: bucket
	// hashes, arrival times, distinct sets.
	DeletedKeys int64
	// Offset is a reset's boundary (see AdminRequest.Group); -1 unknown.
	Offset int64
}

var (
	adminScript   = redis.NewScript("#!lua\n" + LuaLib + adminBody)
	recordsScript = redis.NewScript("#!lua flags=no-writes\n" + recordsBody)
)

// Admin runs one operator action at now: one script run in the subject's
// slot, atomic with respect to the aggregator's batches of that partition,
// that also appends the action's change entry and audit record. The
// caller must not retry a run whose reply it did not get blindly: an action
// is idempotent in effect, but a retry writes a second audit record.
func (s *Store) Admin(ctx context.Context, now time.Time, req AdminRequest) (AdminResult, error) {
	if err := req.validate(now); err != nil {
		return AdminResult{}, err
	}
	p, err := s.PartitionOf(req.Subject)
	if err != nil {
		return AdminResult{}, err
	}
	f := Field(req.Subject)
	banJS, auditJS, err := req.records(f, now)
	if err != nil {
		return AdminResult{}, err
	}
	offKey := ""
	if req.Op == OpReset && req.Group != "" && req.Topic != "" {
		offKey = s.keys.Offset(req.Group, req.Topic, p)
	}
	args := []any{s.keys.Slot(p), f, string(req.Op), now.UnixMilli(), s.maxLog, req.Rule, banJS, auditJS,
		int64(req.MaxWindow / time.Second), int64(s.slack / time.Second), int64(resetAhead / time.Second), offKey, len(req.Distinct)}
	for _, k := range req.Distinct {
		args = append(args, k)
	}
	start := time.Now()
	v, err := adminScript.Run(ctx, s.rdb, []string{s.keys.State(p)}, args...).Slice()
	s.observe("admin", start)
	if err != nil {
		return AdminResult{}, fmt.Errorf("%s %s partition=%d: %w", req.Op, f, p, err)
	}
	if len(v) != 5 {
		return AdminResult{}, fmt.Errorf("%s %s: bad reply %v", req.Op, f, v)
	}
	res := AdminResult{Partition: p, Seq: replyInt(v, 0), EntryID: str(v[1]), DeletedKeys: replyInt(v, 3), Offset: replyInt(v, 4)}
	cl, _ := v[2].([]any)
	for _, c := range cl {
		res.Cleared = append(res.Cleared, str(c))
	}
	return res, nil
}

func (r *AdminRequest) validate(now time.Time) error {
	f := Field(r.Subject)
	if sub, ok := ParseField(f); !ok || sub != r.Subject {
		return fmt.Errorf("%s: subject %q is not action:kind:subject", r.Op, f)
	}
	if r.Operator == "" {
		return fmt.Errorf("%s %s: no operator", r.Op, f)
	}
	switch r.Op {
	case OpBan:
		if !r.Until.After(now) {
			return fmt.Errorf("ban %s: until %s is not after now", f, r.Until.Format(time.RFC3339))
		}
	case OpUnban:
	case OpReset:
		for _, k := range r.Distinct {
			if k == "" || strings.ContainsAny(k, ":{} \t\r\n") {
				return fmt.Errorf("reset %s: distinct kind %q", f, k)
			}
		}
		if r.Rule != "" {
			return fmt.Errorf("reset %s: a rule (%s) cannot be given: the counters are shared by every rule of the action and kind", f, r.Rule)
		}
		if r.MaxWindow < time.Second || r.MaxWindow > rules.MaxWindow {
			return fmt.Errorf("reset %s: max window %s is not in [1s, %s]", f, r.MaxWindow, rules.FormatWindow(rules.MaxWindow))
		}
	default:
		return fmt.Errorf("unknown operator action %q", r.Op)
	}
	return nil
}

// records builds the ban JSON (ban only) and the audit record the script
// completes: the DecisionMessage of the action, with the subject as its field.
func (r *AdminRequest) records(f string, now time.Time) (banJS, auditJS string, err error) {
	d := DecisionMessage{Type: DecisionType(r.Op), Operator: r.Operator, Rule: r.Rule, TS: now, Offset: -1}
	if r.Op == OpBan {
		b, err := json.Marshal(Ban{Until: r.Until, Message: r.Message, Operator: r.Operator, Since: now})
		if err != nil {
			return "", "", fmt.Errorf("ban %s: %w", f, err)
		}
		banJS = string(b)
		d.Until, d.Message = r.Until, r.Message
	}
	a, err := json.Marshal(struct {
		F string `json:"f"`
		operatorWire
	}{f, d.operatorWire()})
	if err != nil {
		return "", "", fmt.Errorf("%s %s: audit record: %w", r.Op, f, err)
	}
	return banJS, string(a), nil
}

// Records is what is recorded of a subject besides its counts.
type Records struct {
	Deny   *Deny         // its deny record, nil when none
	Shadow *Deny         // its shadow record (a shadow rule's would-be deny), nil when none
	Ban    *Ban          // its ban, nil when none or ended
	State  *SubjectState // its decision state (what limiters answer from), nil when none
}

// Records reads a subject's deny, shadow and ban records and decision state
// at now, one read-only script run in its slot.
func (s *Store) Records(ctx context.Context, now time.Time, sub Subject) (Records, error) {
	p, err := s.PartitionOf(sub)
	if err != nil {
		return Records{}, err
	}
	f := Field(sub)
	start := time.Now()
	v, err := recordsScript.RunRO(ctx, s.rdb, []string{s.keys.State(p)}, s.keys.Slot(p), f).Slice()
	s.observe("records", start)
	if err != nil {
		return Records{}, fmt.Errorf("read records %s partition=%d: %w", f, p, err)
	}
	if len(v) != 4 {
		return Records{}, fmt.Errorf("read records %s: bad reply %v", f, v)
	}
	var rec Records
	if js := str(v[0]); js != "" {
		if rec.Deny, err = ParseDeny([]byte(js)); err != nil {
			return Records{}, fmt.Errorf("read records %s: %w", f, err)
		}
	}
	if js := str(v[1]); js != "" {
		if rec.Shadow, err = ParseDeny([]byte(js)); err != nil {
			return Records{}, fmt.Errorf("read records %s: shadow %w", f, err)
		}
	}
	if js := str(v[2]); js != "" {
		b, err := ParseBan([]byte(js))
		if err != nil {
			return Records{}, fmt.Errorf("read records %s: %w", f, err)
		}
		if b.InForce(now) {
			rec.Ban = b
		}
	}
	if js := str(v[3]); js != "" {
		st, err := ParseState([]byte(js))
		if err != nil {
			return Records{}, fmt.Errorf("read records %s: %w", f, err)
		}
		if st.Expires().After(now) {
			rec.State = &st
		}
	}
	return rec, nil
}

// parseBanChanges decodes a change entry's "b" field:
// [["<field>",<ban JSON or null>],...].
func parseBanChanges(id, s string) ([]BanChange, error) {
	var raw [][2]json.RawMessage
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("change %s: bans: %w", id, err)
	}
	out := make([]BanChange, 0, len(raw))
	for _, pair := range raw {
		var f string
		if err := json.Unmarshal(pair[0], &f); err != nil {
			return nil, fmt.Errorf("change %s: ban field: %w", id, err)
		}
		sub, ok := ParseField(f)
		if !ok {
			return nil, fmt.Errorf("change %s: bad ban subject %q", id, f)
		}
		bc := BanChange{Subject: sub}
		if string(pair[1]) != "null" {
			b, err := ParseBan(pair[1])
			if err != nil {
				return nil, fmt.Errorf("change %s: %w", id, err)
			}
			bc.Ban = b
		}
		out = append(out, bc)
	}
	return out, nil
}

// parseBans decodes a snapshot's flat ban hash, leaving out the bans that
// ended by now.
func parseBans(flat []any, now time.Time) (map[Subject]Ban, error) {
	out := map[Subject]Ban{}
	for i := 0; i+1 < len(flat); i += 2 {
		sub, ok := ParseField(str(flat[i]))
		if !ok {
			return nil, fmt.Errorf("bad ban subject field %q", str(flat[i]))
		}
		b, err := ParseBan([]byte(str(flat[i+1])))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", str(flat[i]), err)
		}
		if b.InForce(now) {
			out[sub] = *b
		}
	}
	return out, nil
}

// DecisionType tells an operator action's record on the decisions topic
// from the aggregator's deny decisions (empty type).
type DecisionType string

// Types of operator records; the aggregator's deny decisions have none.
const (
	DecisionBan   = DecisionType(OpBan)
	DecisionUnban = DecisionType(OpUnban)
	DecisionReset = DecisionType(OpReset)
)

// IsOperator reports whether d records an operator's action rather than a
// deny decision of the aggregator.
func (d DecisionMessage) IsOperator() bool { return d.Type != "" }

// operatorWire is an operator action's floodgate.decisions message:
//
//	{"id":"p7-1795643443125-0-0","type":"unban","action":"login_failed","kind":"ip","subject":"203.0.113.7",
//	 "operator":"alice","cleared":["deny","state"],"ts":1795643443125}
//
// with "rule" (unban of one rule), "until" and "message" (ban),
// "deleted_keys" and "offset" (reset).
type operatorWire struct {
	ID       string       `json:"id,omitempty"`
	Type     DecisionType `json:"type"`
	Action   string       `json:"action,omitempty"`
	Kind     string       `json:"kind,omitempty"`
	Subject  string       `json:"subject,omitempty"`
	Operator string       `json:"operator"`
	Rule     string       `json:"rule,omitempty"`
	Until    int64        `json:"until,omitempty"`
	Message  string       `json:"message,omitempty"`
	Cleared  []string     `json:"cleared,omitempty"`
	Deleted  int64        `json:"deleted_keys,omitempty"`
	Offset   *int64       `json:"offset,omitempty"`
	TS       int64        `json:"ts"`
}

func (d DecisionMessage) operatorWire() operatorWire {
	w := operatorWire{
		ID: d.ID, Type: d.Type, Action: d.Action, Kind: d.Kind, Subject: d.Subject, Operator: d.Operator,
		Rule: d.Rule, Message: d.Message, Cleared: d.Cleared, Deleted: d.DeletedKeys, TS: d.TS.UnixMilli(),
	}
	if !d.Until.IsZero() {
		w.Until = d.Until.UnixMilli()
	}
	if d.Type == DecisionReset && d.Offset >= 0 {
		w.Offset = &d.Offset
	}
	return w
}
