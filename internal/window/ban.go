package window

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bans and operator actions as the slot holds them. The actions themselves
// (ban, unban, reset) are package operator's writes; their change entries
// and audit records (DecisionMessage with a Type) are read here.

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

var recordsScript = redis.NewScript("#!lua flags=no-writes\n" + recordsBody)

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
	DecisionBan   DecisionType = "ban"
	DecisionUnban DecisionType = "unban"
	DecisionReset DecisionType = "reset"
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

// AuditJSON is the audit record of an operator action as the admin script
// of package operator completes it into the action's change entry: the
// action's message with the subject's field as "f".
func (d DecisionMessage) AuditJSON(field string) ([]byte, error) {
	return json.Marshal(struct {
		F string `json:"f"`
		operatorWire
	}{field, d.operatorWire()})
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
