package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// AdminOp is an operator action.
type AdminOp string

// The operator actions; docs/operations.md says what each does.
const (
	OpBan   = AdminOp(window.DecisionBan)
	OpUnban = AdminOp(window.DecisionUnban)
	OpReset = AdminOp(window.DecisionReset)
)

// resetAhead is how far past now a reset deletes buckets: events stamped
// ahead of the operator's clock (the aggregator accepts a future skew, 5s by
// default; limiters' clocks differ) are reset too.
const resetAhead = 5 * time.Minute

// AdminRequest is one operator action on one subject.
type AdminRequest struct {
	Op       AdminOp
	Subject  window.Subject
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
	// holds Seq of the partition (decide.State.Seq) applies the action.
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

var adminScript = redis.NewScript("#!lua\n" + window.LuaLib + adminBody)

// Writer runs the operator actions in the slots of a window.Store: one
// script run per action (admin.lua), atomic with respect to the
// aggregator's batches of the subject's partition. Safe for concurrent use.
type Writer struct {
	st   *window.Store
	rdb  window.Redis
	keys window.Keys
}

// NewWriter returns a Writer over st, which must know the partition count
// (StoreConfig.Partitions).
func NewWriter(st *window.Store) (*Writer, error) {
	if st == nil {
		return nil, errors.New("operator writer: nil store")
	}
	return &Writer{st: st, rdb: st.Redis(), keys: st.Keys()}, nil
}

// Admin runs one operator action at now: one script run in the subject's
// slot, atomic with respect to the aggregator's batches of that partition,
// that also appends the action's change entry and audit record. The
// caller must not retry a run whose reply it did not get blindly: an action
// is idempotent in effect, but a retry writes a second audit record.
func (s *Writer) Admin(ctx context.Context, now time.Time, req AdminRequest) (AdminResult, error) {
	if err := req.validate(now); err != nil {
		return AdminResult{}, err
	}
	p, err := s.st.PartitionOf(req.Subject)
	if err != nil {
		return AdminResult{}, err
	}
	f := window.Field(req.Subject)
	banJS, auditJS, err := req.records(f, now)
	if err != nil {
		return AdminResult{}, err
	}
	offKey := ""
	if req.Op == OpReset && req.Group != "" && req.Topic != "" {
		offKey = s.keys.Offset(req.Group, req.Topic, p)
	}
	args := []any{s.keys.Slot(p), f, string(req.Op), now.UnixMilli(), s.st.MaxLog(), req.Rule, banJS, auditJS,
		int64(req.MaxWindow / time.Second), int64(s.st.Slack() / time.Second), int64(resetAhead / time.Second), offKey, len(req.Distinct)}
	for _, k := range req.Distinct {
		args = append(args, k)
	}
	start := time.Now()
	v, err := adminScript.Run(ctx, s.rdb, []string{s.keys.State(p)}, args...).Slice()
	s.st.Observe("admin", start)
	if err != nil {
		return AdminResult{}, fmt.Errorf("%s %s partition=%d: %w", req.Op, f, p, err)
	}
	if len(v) != 5 {
		return AdminResult{}, fmt.Errorf("%s %s: bad reply %v", req.Op, f, v)
	}
	res := AdminResult{Partition: p, Seq: replyInt(v, 0), EntryID: replyStr(v[1]), DeletedKeys: replyInt(v, 3), Offset: replyInt(v, 4)}
	cl, _ := v[2].([]any)
	for _, c := range cl {
		res.Cleared = append(res.Cleared, replyStr(c))
	}
	return res, nil
}

func (r *AdminRequest) validate(now time.Time) error {
	f := window.Field(r.Subject)
	if sub, ok := window.ParseField(f); !ok || sub != r.Subject {
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
	d := window.DecisionMessage{Type: window.DecisionType(r.Op), Operator: r.Operator, Rule: r.Rule, TS: now, Offset: -1}
	if r.Op == OpBan {
		b, err := json.Marshal(window.Ban{Until: r.Until, Message: r.Message, Operator: r.Operator, Since: now})
		if err != nil {
			return "", "", fmt.Errorf("ban %s: %w", f, err)
		}
		banJS = string(b)
		d.Until, d.Message = r.Until, r.Message
	}
	a, err := d.AuditJSON(f)
	if err != nil {
		return "", "", fmt.Errorf("%s %s: audit record: %w", r.Op, f, err)
	}
	return banJS, string(a), nil
}

func replyInt(v []any, i int) int64 {
	if i >= len(v) {
		return 0
	}
	n, _ := v[i].(int64)
	return n
}

func replyStr(v any) string {
	s, _ := v.(string)
	return s
}
