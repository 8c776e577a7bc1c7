package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/timespan"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// Store is what operator actions read of the live store; *window.Store.
type Store interface {
	Records(ctx context.Context, now time.Time, sub window.Subject) (window.Records, error)
	PartitionOf(sub window.Subject) (int, error)
}

var _ Store = (*window.Store)(nil)

var _ Checker = (*decide.Limiter)(nil)

// Checker answers a check as a limiter does, from memory or (Exact) from
// Redis: *decide.Limiter, or a SnapshotChecker where no limiter runs.
type Checker interface {
	Check(ctx context.Context, req limitapi.Request) (limitapi.Decision, error)
}

// Limits of a request.
const (
	MaxSubjects   = 16
	MaxBan        = 366 * 24 * time.Hour
	MaxMessageLen = 512
	// DefaultApplyWait bounds how long a write through a limiter's admin
	// endpoint waits for that limiter's memory to apply it.
	DefaultApplyWait = 2 * time.Second
)

// Config configures an Operator.
type Config struct {
	Store Store // required
	// Writer runs ban, unban and reset on the same store (NewWriter).
	// Required.
	Writer *Writer
	Rules  func() *rules.Set // the rules in force; required
	// Checker answers Inspect's "what would a check say now". Required for
	// Inspect.
	Checker Checker
	// Applied, when set, returns the sequence number of the last change of
	// a partition this process's limiter memory holds (decide.State.Seq):
	// a write waits until its entries are applied, up to ApplyWait, and says
	// whether they were (Result.AppliedHere).
	Applied func(partition int) int64
	// ApplyWait bounds that wait. Default DefaultApplyWait.
	ApplyWait time.Duration
	// Group and Topic name the live consumer group and the events topic: a
	// reset records the group's next offset as its boundary. Empty: not
	// recorded.
	Group, Topic string
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Pseudonym is how a reset's log line and error name the subject: a
	// reset is how a subject is erased (floodgate erase), and a log that
	// kept it would undo the erasure. Default event.Digest; erase gives
	// history's keyed hash when it has the key. Bans and unbans log the
	// subject: their audit names it anyway.
	Pseudonym func(subject string) string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives floodgate_admin_actions_total. Nil: not registered.
	Registerer prometheus.Registerer
}

// Operator runs the operator controls — inspect, ban, unban, reset — on
// the live store. Writes take effect in every limiter through the change
// streams, and are published on the decisions topic by the relay of the
// aggregator that owns the partition (docs/operations.md). Safe for
// concurrent use.
type Operator struct {
	cfg     Config
	log     *slog.Logger
	actions *prometheus.CounterVec
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("operator: nil store")
	case c.Writer == nil:
		return errors.New("operator: nil writer")
	case c.Rules == nil:
		return errors.New("operator: no rules source")
	case c.ApplyWait < 0:
		return fmt.Errorf("operator: apply wait %s is negative", c.ApplyWait)
	case (c.Group == "") != (c.Topic == ""):
		return fmt.Errorf("operator: group %q and topic %q: give both (a reset's boundary) or neither", c.Group, c.Topic)
	}
	return nil
}

// New validates cfg and returns an Operator.
func New(cfg Config) (*Operator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ApplyWait == 0 {
		cfg.ApplyWait = DefaultApplyWait
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Pseudonym == nil {
		cfg.Pseudonym = event.Digest
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	o := &Operator{cfg: cfg, log: cfg.Logger.With("component", "operator"), actions: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_admin_actions_total",
		Help: "Operator actions by action (inspect, ban, unban, reset) and result (ok, invalid, unauthenticated, error).",
	}, []string{"action", "result"})}
	for _, a := range []string{"inspect", "ban", "unban", "reset"} {
		for _, r := range []string{"ok", "invalid", "unauthenticated", "error"} {
			o.actions.WithLabelValues(a, r)
		}
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(o.actions); err != nil {
			return nil, fmt.Errorf("operator: register metrics: %w", err)
		}
	}
	return o, nil
}

// Ban denies req's subjects for req.For whatever their counts.
func (o *Operator) Ban(ctx context.Context, req Request) (Result, error) {
	return o.write(ctx, OpBan, req)
}

// Unban clears req's subjects' deny and shadow records, bans and decision
// state (with req.Rule: only that rule's records and state); their counts
// stay.
func (o *Operator) Unban(ctx context.Context, req Request) (Result, error) {
	return o.write(ctx, OpUnban, req)
}

// Reset unbans req's subjects and deletes their counters: they start
// afresh.
func (o *Operator) Reset(ctx context.Context, req Request) (Result, error) {
	return o.write(ctx, OpReset, req)
}

// write runs op on every subject, one script run each (each atomic in its
// slot; several subjects are not one transaction). On an error, the result
// holds the subjects done before it.
func (o *Operator) write(ctx context.Context, op AdminOp, req Request) (Result, error) {
	set := o.cfg.Rules()
	if err := o.validate(op, &req, set); err != nil {
		o.actions.WithLabelValues(string(op), "invalid").Inc()
		return Result{}, err
	}
	now := o.cfg.Now()
	res := Result{Op: string(op), Action: req.Action, Operator: req.Operator, At: now, Rule: req.Rule, Message: req.Message}
	if op == OpBan {
		until := now.Add(req.For)
		res.Until = &until
	}
	for _, s := range req.Subjects {
		// validate gave the subject as the limiter looks it up (an IPv6
		// address: its prefix; an e-mail normalized), or the ban would never
		// be consulted
		sub := window.Subject{Action: req.Action, Kind: s.Kind, Subject: s.Subject}
		ar := AdminRequest{Op: op, Subject: sub, Operator: req.Operator, Rule: req.Rule, Message: req.Message,
			MaxWindow: set.MaxWindowFor(req.Action, s.Kind), Distinct: distinctKinds(set, req.Action, s.Kind), Group: o.cfg.Group, Topic: o.cfg.Topic}
		if res.Until != nil {
			ar.Until = *res.Until
		}
		logged, field := s.Subject, window.Field(sub)
		if op == OpReset {
			logged = o.cfg.Pseudonym(s.Subject)
			field = window.Field(window.Subject{Action: sub.Action, Kind: sub.Kind, Subject: logged})
		}
		r, err := o.cfg.Writer.Admin(ctx, now, ar)
		if err != nil {
			o.actions.WithLabelValues(string(op), "error").Inc()
			return res, fmt.Errorf("%s %s by %s: %w", op, field, req.Operator, err)
		}
		sr := SubjectResult{Kind: s.Kind, Subject: sub.Subject, Partition: r.Partition, Seq: r.Seq, Entry: r.EntryID, Cleared: r.Cleared, DeletedKeys: r.DeletedKeys}
		if op == OpReset && r.Offset >= 0 {
			sr.Offset = &r.Offset
		}
		res.Subjects = append(res.Subjects, sr)
		attrs := []any{"op", op, "operator", req.Operator, "action", req.Action, "kind", s.Kind, "subject", logged,
			"partition", r.Partition, "seq", r.Seq}
		switch op {
		case OpBan:
			attrs = append(attrs, "until", ar.Until)
		case OpUnban:
			attrs = append(attrs, "rule", req.Rule, "cleared", r.Cleared)
		case OpReset:
			attrs = append(attrs, "cleared", r.Cleared, "deleted_keys", r.DeletedKeys, "offset", r.Offset)
		}
		o.log.Info("operator action", attrs...)
	}
	o.actions.WithLabelValues(string(op), "ok").Inc()
	if o.cfg.Applied != nil {
		ok := o.waitApplied(ctx, res.Subjects)
		res.AppliedHere = &ok
	}
	return res, nil
}

// waitApplied waits until this process's limiter memory holds every
// subject's change, up to ApplyWait: its feed reads the entry within one
// stream read.
func (o *Operator) waitApplied(ctx context.Context, subs []SubjectResult) bool {
	ctx, cancel := context.WithTimeout(ctx, o.cfg.ApplyWait)
	defer cancel()
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		done := true
		for _, s := range subs {
			done = done && o.cfg.Applied(s.Partition) >= s.Seq
		}
		if done {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// operatorRE is the alphabet of operator names: token names, $USER,
// e-mail addresses.
var operatorRE = regexp.MustCompile(`^[A-Za-z0-9_.@+-]{1,64}$`)

// validate checks req for op against the event contract, the request
// limits and the rules, and removes repeated subjects.
func (o *Operator) validate(op AdminOp, req *Request, set *rules.Set) error {
	if err := validateSubjects(req, set); err != nil {
		return err
	}
	if op == OpBan || op == OpUnban || op == OpReset {
		if !operatorRE.MatchString(req.Operator) {
			return invalidf("operator %q: 1 to 64 of [A-Za-z0-9_.@+-] (--operator, or the admin token's name)", req.Operator)
		}
	}
	if req.Rule != "" && op != OpUnban {
		return invalidf("a rule applies to unban only: a %s covers every rule of the action and kind", op)
	}
	if op != OpBan && (req.For != 0 || req.Message != "") {
		return invalidf("a duration and a message apply to ban only")
	}
	switch op {
	case OpBan:
		if req.For < time.Second || req.For > MaxBan {
			return invalidf("ban for %s: want 1s to %s", timespan.Format(req.For), timespan.Format(MaxBan))
		}
		if err := validMessage(req.Message); err != nil {
			return err
		}
		return needRules(req, set, "a ban would never be consulted")
	case OpUnban:
		if req.Rule != "" && !ruleRE.MatchString(req.Rule) {
			return invalidf("rule %q: only [a-z0-9_.-], 1 to 64 bytes", req.Rule)
		}
	case OpReset:
		return needRules(req, set, "nothing is counted to reset (unban clears its records)")
	}
	return nil
}

var ruleRE = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

// distinctKinds are the attr kinds the distinct rules of an action and kind
// count: a reset deletes their sets.
func distinctKinds(set *rules.Set, action, kind string) []string {
	var out []string
	for _, r := range set.Match(action, kind) {
		if r.Distinct != "" && !slices.Contains(out, r.Distinct) {
			out = append(out, r.Distinct)
		}
	}
	return out
}

// validateSubjects checks names as the limiter does (the event contract),
// gives each subject as set counts it and removes repeated subjects.
func validateSubjects(req *Request, set *rules.Set) error {
	if req.Action == "" {
		return invalidf("action is required")
	}
	if len(req.Subjects) == 0 {
		return invalidf("no subjects: give at least one kind=subject")
	}
	if len(req.Subjects) > MaxSubjects {
		// Before any work: the checks below are per subject, and the
		// duplicates' pairwise.
		return invalidf("%d subjects, at most %d", len(req.Subjects), MaxSubjects)
	}
	var subs []limitapi.Subject
	for _, s := range req.Subjects {
		// The subject as the limiter decides it and the aggregator counts
		// it (rules.Set.Subject: normalized, IPv6 by prefix; "Victim@x" is
		// victim@x), or its digest when that is no valid subject: an
		// operator names it the same way, and two spellings are one subject.
		s.Subject = event.CanonicalSubject(set.Subject(s.Kind, s.Subject))
		e := event.Event{ID: "x", Action: req.Action, Kind: s.Kind, Subject: s.Subject, TS: time.Unix(1_800_000_000, 0)}
		if err := e.Validate(); err != nil {
			var ee *event.Error
			if errors.As(err, &ee) {
				why := ee.Detail
				if why == "" {
					why = ee.Reason
				}
				return invalidf("%s %q: %s", ee.Field, fieldValue(ee.Field, req.Action, s), why)
			}
			return invalidf("%v", err)
		}
		dup := false
		for _, o := range subs {
			dup = dup || o == s
		}
		if !dup {
			subs = append(subs, s)
		}
	}
	req.Subjects = subs
	return nil
}

func fieldValue(field, action string, s limitapi.Subject) string {
	switch field {
	case "action":
		return action
	case "kind":
		return s.Kind
	}
	return s.Subject
}

func validMessage(m string) error {
	if len(m) > MaxMessageLen {
		return invalidf("message of %d bytes, at most %d", len(m), MaxMessageLen)
	}
	if !utf8.ValidString(m) {
		return invalidf("message is not UTF-8")
	}
	for _, r := range m {
		if unicode.IsControl(r) {
			return invalidf("message holds a control character")
		}
	}
	return nil
}

// needRules refuses subjects that no rule of the action applies to.
func needRules(req *Request, set *rules.Set, why string) error {
	for _, s := range req.Subjects {
		if len(set.Match(req.Action, s.Kind)) == 0 {
			return invalidf("no rule of action %q applies to kind %q: %s", req.Action, s.Kind, why)
		}
	}
	return nil
}

// Error is an operator request refused as invalid: HTTP 400, a CLI usage
// error.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func invalidf(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// IsInvalid reports whether err refuses a request as invalid.
func IsInvalid(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
