package window

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"floodgate/aggregator"
	"floodgate/rules"
)

// Redis is what the Store needs of a Redis client: scripts only.
// *redis.Client and *redis.Ring satisfy it.
type Redis = redis.Scripter

var _ Redis = (*redis.Client)(nil)

// Subject is one counted thing: a feature value (Subject) of a feature Kind
// for one Action. Each subject has its own buckets and deny record.
type Subject struct {
	Action, Kind, Subject string
}

// StoreConfig configures a Store.
type StoreConfig struct {
	// Prefix starts every key. Default "fg". Must not contain braces or
	// whitespace (hash tags are the Store's own).
	Prefix string
	// Slack is added to every bucket hash's time to live, so a lookup
	// racing an expiry, or a limiter whose clock is slightly behind, still
	// finds whole windows. Default 1m.
	Slack time.Duration
	// MaxSubjects caps the distinct subjects of one apply script run. A
	// batch with more is applied as several runs over consecutive offset
	// ranges, each atomic with its own offset, so that no script blocks
	// Redis (and the limiter's lookups) for long. Default 1000.
	MaxSubjects int
	// Registerer receives floodgate_redis_seconds{op}. Nil: not registered.
	Registerer prometheus.Registerer
}

// Store keeps multi-level bucket counters, deny records and partition
// offsets in Redis. docs/redis.md describes the layout. Safe for concurrent
// use.
type Store struct {
	rdb     Redis
	prefix  string
	slack   time.Duration
	maxSub  int
	apply   *redis.Script
	check   *redis.Script
	resume  *redis.Script
	latency *prometheus.HistogramVec
}

// NewStore returns a Store over rdb.
func NewStore(rdb Redis, cfg StoreConfig) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("window store: nil redis client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "fg"
	}
	if strings.ContainsAny(cfg.Prefix, "{} \t\r\n") {
		return nil, fmt.Errorf("window store: key prefix %q must not contain braces or whitespace", cfg.Prefix)
	}
	if cfg.Slack < 0 {
		return nil, fmt.Errorf("window store: slack %s is negative", cfg.Slack)
	}
	if cfg.Slack == 0 {
		cfg.Slack = time.Minute
	}
	if cfg.MaxSubjects < 0 {
		return nil, fmt.Errorf("window store: max subjects %d is negative", cfg.MaxSubjects)
	}
	if cfg.MaxSubjects == 0 {
		cfg.MaxSubjects = 1000
	}
	s := &Store{
		rdb:    rdb,
		prefix: cfg.Prefix,
		slack:  cfg.Slack,
		maxSub: cfg.MaxSubjects,
		// The shebang makes Redis refuse the whole script up front when it
		// is out of memory, instead of failing half-way through a batch.
		apply:  redis.NewScript("#!lua\n" + LuaLib + applyBody),
		check:  redis.NewScript("#!lua flags=no-writes\n" + LuaLib + checkBody),
		resume: redis.NewScript("#!lua flags=no-writes\n" + resumeBody),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "floodgate_redis_seconds",
			Help:    "Latency of the window store's Redis round trips by operation (apply, check, resume).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"op"}),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.latency); err != nil {
			return nil, fmt.Errorf("window store: register metrics: %w", err)
		}
	}
	return s, nil
}

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.prefix }

// Slack returns the extra time to live of bucket hashes.
func (s *Store) Slack() time.Duration { return s.slack }

// Tag returns the Redis hash tag of a subject, "{action:kind:subject}":
// every key of the subject contains it, so they share a cluster slot.
// Action and kind cannot contain ':' and key suffixes cannot contain '}',
// so the key of one subject is never the key of another.
func Tag(sub Subject) string { return "{" + sub.Action + ":" + sub.Kind + ":" + sub.Subject + "}" }

// DenyKey returns the key of a subject's deny record.
func (s *Store) DenyKey(sub Subject) string { return s.prefix + ":" + Tag(sub) + ":deny" }

// ShadowKey returns the key of a subject's shadow decision record: like a
// deny record, but no lookup denies on it.
func (s *Store) ShadowKey(sub Subject) string { return s.prefix + ":" + Tag(sub) + ":shadow" }

// BucketKey returns the key of the bucket hash of a level ('s', 'm' or 'h')
// holding time t.
func (s *Store) BucketKey(sub Subject, level byte, t time.Time) string {
	u := t.Unix()
	var n int64
	switch level {
	case 's':
		n = floorDiv(u, 60)
	case 'm':
		n = floorDiv(u, 3600)
	case 'h':
		n = floorDiv(u, 86400)
	default:
		panic("window: bucket level must be s, m or h")
	}
	return s.prefix + ":" + Tag(sub) + ":" + string(level) + ":" + strconv.FormatInt(n, 10)
}

// OffsetKey returns the key holding the next offset of a partition for a
// consumer group.
func (s *Store) OffsetKey(group, topic string, partition int) string {
	return s.prefix + ":off:" + group + ":" + topic + ":" + strconv.Itoa(partition)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func (s *Store) observe(op string, start time.Time) {
	s.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// Resume returns the next offset stored for a partition of group; ok is
// false when none is stored.
func (s *Store) Resume(ctx context.Context, group, topic string, partition int) (next int64, ok bool, err error) {
	defer s.observe("resume", time.Now())
	v, err := s.resume.Run(ctx, s.rdb, nil, s.OffsetKey(group, topic, partition)).Text()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read offset group=%s topic=%s partition=%d: %w", group, topic, partition, err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("read offset group=%s topic=%s partition=%d: bad value %q", group, topic, partition, v)
	}
	return n, true, nil
}

// ApplyResult tells what one Apply did.
type ApplyResult struct {
	// Duplicate is true when the store already held the whole batch.
	Duplicate bool
	// Trimmed counts records skipped because the store already held their
	// offsets (a stale owner's batch overlapping the new owner's).
	Trimmed int
	// Gap is the number of offsets between the stored next offset and the
	// batch's first one (0 when contiguous or when nothing was stored).
	Gap int64
	// Events counted into buckets, and events skipped: older than every
	// window of their rules, counted already by the limiter (strict mode),
	// or matching no rule.
	Applied, Old, CountedByLimiter, NoRule int
	// Subjects touched (evaluated).
	Subjects int
	// Decisions are the new deny and shadow decisions.
	Decisions []Decision
}

type pendingSubject struct {
	sub     Subject
	profile int
	eval    int64
	incs    map[int64]int64
}

type profileKey struct {
	action, kind string
	allowed      string // names of rules that allowlist the subject
}

type profile struct {
	maxw   int64
	limits []profileLimit
}

type profileLimit struct {
	rule   *rules.Rule
	ruleIx int
	limit  rules.Limit
}

// Apply applies a batch of a partition for a consumer group at time now:
// each record's event is added to its subject's buckets by event time
// (coalesced per subject and second), the partition's next offset is
// stored, and every touched subject is evaluated against its rules in set,
// all in one script run. A batch the store already holds changes nothing.
//
// Events older than the longest window of their rules, events that match
// no rule, and Counted events (the limiter's strict mode counted them) are
// not added; subjects with Counted events are still evaluated.
//
// A batch with more than MaxSubjects subjects is applied in several script
// runs. When one fails, the result holds what the runs before it did, their
// decisions included, along with the error: a retry finds those runs
// applied already and will not report their decisions again, so the caller
// must publish them now.
func (s *Store) Apply(ctx context.Context, group string, b aggregator.Batch, set *rules.Set, now time.Time) (ApplyResult, error) {
	chunks := s.split(b)
	if len(chunks) == 1 {
		return s.applyChunk(ctx, group, b, set, now)
	}
	total := ApplyResult{Duplicate: true}
	for _, c := range chunks {
		res, err := s.applyChunk(ctx, group, c, set, now)
		if err != nil {
			return total, err
		}
		total.Duplicate = total.Duplicate && res.Duplicate
		total.Trimmed += res.Trimmed
		total.Gap += res.Gap
		total.Applied += res.Applied
		total.Old += res.Old
		total.CountedByLimiter += res.CountedByLimiter
		total.NoRule += res.NoRule
		total.Subjects += res.Subjects
		total.Decisions = append(total.Decisions, res.Decisions...)
	}
	return total, nil
}

// split cuts b into batches of consecutive offsets with at most maxSub
// distinct subjects each. Together they cover b's offsets exactly.
func (s *Store) split(b aggregator.Batch) []aggregator.Batch {
	var out []aggregator.Batch
	cur := aggregator.Batch{Topic: b.Topic, Partition: b.Partition, First: b.First}
	seen := map[Subject]struct{}{}
	start := 0
	for i := range b.Records {
		e := &b.Records[i].Event
		sub := Subject{e.Action, e.Kind, e.Subject}
		if _, ok := seen[sub]; ok {
			continue
		}
		if len(seen) == s.maxSub {
			cur.Records = b.Records[start:i]
			cur.Last = b.Records[i].Offset - 1
			out = append(out, cur)
			cur = aggregator.Batch{Topic: b.Topic, Partition: b.Partition, First: b.Records[i].Offset}
			start = i
			clear(seen)
		}
		seen[sub] = struct{}{}
	}
	cur.Records = b.Records[start:]
	cur.Last = b.Last
	return append(out, cur)
}

func (s *Store) applyChunk(ctx context.Context, group string, b aggregator.Batch, set *rules.Set, now time.Time) (ApplyResult, error) {
	trimmed := 0
	for {
		res, trimTo, err := s.applyOnce(ctx, group, b, set, now)
		res.Trimmed = trimmed
		if err != nil || trimTo < 0 {
			return res, err
		}
		// The stored offset lies inside the batch (a stale owner raced the
		// new one): only the tail is new. trimTo > b.First, so this ends.
		kept := make([]aggregator.Record, 0, len(b.Records))
		for _, r := range b.Records {
			if r.Offset >= trimTo {
				kept = append(kept, r)
			}
		}
		trimmed += len(b.Records) - len(kept)
		b.First, b.Records = trimTo, kept
	}
}

// applyOnce returns trimTo >= 0 when the store holds the batch's head.
func (s *Store) applyOnce(ctx context.Context, group string, b aggregator.Batch, set *rules.Set, now time.Time) (ApplyResult, int64, error) {
	var res ApplyResult
	nowSec := floorDiv(now.UnixMilli(), 1000)
	profiles := map[profileKey]int{}
	var profs []profile
	ruleIx := map[*rules.Rule]int{}
	var ruleList []*rules.Rule
	subjects := map[Subject]*pendingSubject{}
	var order []*pendingSubject

	for i := range b.Records {
		r := &b.Records[i]
		ev := &r.Event
		maxw := int64(set.MaxWindowFor(ev.Action, ev.Kind) / time.Second)
		if maxw == 0 {
			res.NoRule++
			continue
		}
		sec := floorDiv(ev.TS.UnixMilli(), 1000)
		if sec <= nowSec-maxw {
			res.Old++
			continue
		}
		sub := Subject{ev.Action, ev.Kind, ev.Subject}
		ps := subjects[sub]
		if ps == nil {
			ps = &pendingSubject{sub: sub, eval: nowSec, incs: map[int64]int64{}}
			ps.profile = s.profileFor(set, sub, maxw, profiles, &profs, ruleIx, &ruleList)
			subjects[sub] = ps
			order = append(order, ps)
		}
		ps.eval = max(ps.eval, sec)
		if r.Counted {
			res.CountedByLimiter++
			continue
		}
		n := ev.N
		if n == 0 {
			n = 1
		}
		ps.incs[sec] += n
		res.Applied++
	}
	res.Subjects = len(order)

	args := make([]any, 0, 16+2*len(ruleList)+8*len(order))
	args = append(args, s.prefix, s.OffsetKey(group, b.Topic, b.Partition), b.First, b.Last,
		now.UnixMilli(), int64(s.slack/time.Second), len(ruleList))
	for _, r := range ruleList {
		args = append(args, r.Name, r.Message)
	}
	args = append(args, len(profs))
	for _, p := range profs {
		args = append(args, p.maxw, len(p.limits))
		for _, l := range p.limits {
			shadow := 0
			if l.rule.Shadow {
				shadow = 1
			}
			args = append(args, l.ruleIx+1, l.limit.Count, int64(l.limit.Window/time.Second), shadow)
		}
	}
	args = append(args, len(order))
	for _, ps := range order {
		args = append(args, Tag(ps.sub), ps.profile+1, ps.eval, len(ps.incs))
		secs := make([]int64, 0, len(ps.incs))
		for sec := range ps.incs {
			secs = append(secs, sec)
		}
		sort.Slice(secs, func(i, j int) bool { return secs[i] < secs[j] })
		for _, sec := range secs {
			args = append(args, sec, ps.incs[sec])
		}
	}

	start := time.Now()
	out, err := s.apply.Run(ctx, s.rdb, nil, args...).Int64Slice()
	s.observe("apply", start)
	if err != nil {
		// Whether the script ran is unknown: report nothing of it.
		return ApplyResult{}, -1, fmt.Errorf("apply batch group=%s topic=%s partition=%d offsets=%d-%d: %w", group, b.Topic, b.Partition, b.First, b.Last, err)
	}
	if len(out) < 2 {
		return res, -1, fmt.Errorf("apply batch partition=%d: short script reply %v", b.Partition, out)
	}
	switch out[0] {
	case 1:
		return ApplyResult{Duplicate: true}, -1, nil
	case 2:
		return ApplyResult{}, out[1], nil
	}
	if prev := out[1]; prev >= 0 && b.First > prev {
		res.Gap = b.First - prev
	}
	for i := 2; i+5 < len(out); i += 6 {
		ps := order[out[i]-1]
		l := profs[ps.profile].limits[out[i+1]-1]
		res.Decisions = append(res.Decisions, Decision{
			Action:  ps.sub.Action,
			Kind:    ps.sub.Kind,
			Subject: ps.sub.Subject,
			Rule:    l.rule.Name,
			Limit:   l.limit,
			Count:   out[i+2],
			Until:   time.UnixMilli(out[i+3]).UTC(),
			Shadow:  out[i+4] == 1,
			Message: l.rule.Message,
			TS:      time.Unix(out[i+5], 0).UTC(),
		})
	}
	return res, -1, nil
}

// profileFor returns the index of the limits profile of a subject: the
// limits of its rules, less the rules that allowlist it.
func (s *Store) profileFor(set *rules.Set, sub Subject, maxw int64, profiles map[profileKey]int, profs *[]profile, ruleIx map[*rules.Rule]int, ruleList *[]*rules.Rule) int {
	matched := set.Match(sub.Action, sub.Kind)
	var allowed []string
	for _, r := range matched {
		if r.Allowed(sub.Subject) {
			allowed = append(allowed, r.Name)
		}
	}
	key := profileKey{sub.Action, sub.Kind, strings.Join(allowed, ",")}
	if ix, ok := profiles[key]; ok {
		return ix
	}
	p := profile{maxw: maxw}
	for _, r := range matched {
		if r.Allowed(sub.Subject) {
			continue
		}
		ix, ok := ruleIx[r]
		if !ok {
			ix = len(*ruleList)
			ruleIx[r] = ix
			*ruleList = append(*ruleList, r)
		}
		for _, l := range r.Limits {
			p.limits = append(p.limits, profileLimit{rule: r, ruleIx: ix, limit: l})
		}
	}
	*profs = append(*profs, p)
	profiles[key] = len(*profs) - 1
	return len(*profs) - 1
}

// Query asks for a subject's deny record and the sums of some windows.
type Query struct {
	Subject Subject
	Windows []time.Duration // whole seconds, at most rules.MaxWindow
}

// State answers a Query.
type State struct {
	Deny *Deny   // nil when the subject has no deny record
	Sums []int64 // events in each window ending with now's second, in Query order
}

// Check answers queries in one round trip: each subject's deny record and
// the event count of each requested window at now. Window sums are exact to
// the second for windows no longer than the subject's longest rule window
// (see docs/redis.md).
func (s *Store) Check(ctx context.Context, now time.Time, qs []Query) ([]State, error) {
	args := make([]any, 0, 3+4*len(qs))
	args = append(args, s.prefix, now.UnixMilli(), len(qs))
	for _, q := range qs {
		args = append(args, Tag(q.Subject), len(q.Windows))
		for _, w := range q.Windows {
			if w < time.Second || w%time.Second != 0 || w > rules.MaxWindow {
				return nil, fmt.Errorf("check %s: window %s is not a whole number of seconds in [1s, %s]", Tag(q.Subject), w, rules.FormatWindow(rules.MaxWindow))
			}
			args = append(args, int64(w/time.Second))
		}
	}
	start := time.Now()
	v, err := s.check.Run(ctx, s.rdb, nil, args...).Slice()
	s.observe("check", start)
	if err != nil {
		return nil, fmt.Errorf("check %d subjects: %w", len(qs), err)
	}
	if len(v) != len(qs) {
		return nil, fmt.Errorf("check: %d answers for %d subjects", len(v), len(qs))
	}
	out := make([]State, len(qs))
	for i, x := range v {
		row, ok := x.([]any)
		if !ok || len(row) < 1 {
			return nil, fmt.Errorf("check %s: bad reply %v", Tag(qs[i].Subject), x)
		}
		if js, ok := row[0].(string); ok {
			d, err := ParseDeny([]byte(js))
			if err != nil {
				return nil, fmt.Errorf("check %s: %w", Tag(qs[i].Subject), err)
			}
			out[i].Deny = d
		}
		out[i].Sums = make([]int64, 0, len(row)-1)
		for _, n := range row[1:] {
			c, _ := n.(int64)
			out[i].Sums = append(out[i].Sums, c)
		}
	}
	return out, nil
}

// Deny is a deny record: the subject is over Limit (Count events in the
// window) and will be back under it at Until unless more events come. The
// record expires at Until, so its presence alone means "deny".
type Deny struct {
	Rule    string
	Limit   rules.Limit
	Count   int64
	Until   time.Time
	Message string
}

// denyWire is the JSON of deny records; written by the apply script.
type denyWire struct {
	Rule    string `json:"rule"`
	Limit   int64  `json:"limit"`
	Window  string `json:"window"`
	Count   int64  `json:"count"`
	Until   int64  `json:"until"` // Unix milliseconds
	Message string `json:"message"`
}

// ParseDeny decodes a deny record:
//
//	{"rule":"login-failed","limit":5,"window":"1m","count":6,"until":1767225600000,"message":"..."}
//
// until is in Unix milliseconds, window in the rules file syntax.
func ParseDeny(data []byte) (*Deny, error) {
	var w denyWire
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("deny record: %w", err)
	}
	win, err := rules.ParseWindow(w.Window)
	if err != nil {
		return nil, fmt.Errorf("deny record: %w", err)
	}
	return &Deny{
		Rule:    w.Rule,
		Limit:   rules.Limit{Count: w.Limit, Window: win},
		Count:   w.Count,
		Until:   time.UnixMilli(w.Until).UTC(),
		Message: w.Message,
	}, nil
}

// MarshalJSON writes the deny record format (see ParseDeny).
func (d Deny) MarshalJSON() ([]byte, error) {
	return json.Marshal(denyWire{Rule: d.Rule, Limit: d.Limit.Count, Window: rules.FormatWindow(d.Limit.Window), Count: d.Count, Until: d.Until.UnixMilli(), Message: d.Message})
}

// Decision is a new deny (or, for shadow rules, would-be deny) of a subject.
type Decision struct {
	Action, Kind, Subject string
	Rule                  string
	Limit                 rules.Limit
	Count                 int64     // events in the window when decided
	Until                 time.Time // when the window falls back under the limit
	Shadow                bool
	Message               string
	TS                    time.Time // evaluation time (whole second)
}

type decisionWire struct {
	Action  string `json:"action"`
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Rule    string `json:"rule"`
	Limit   int64  `json:"limit"`
	Window  string `json:"window"`
	Count   int64  `json:"count"`
	Until   int64  `json:"until"`
	Shadow  bool   `json:"shadow"`
	Message string `json:"message,omitempty"`
	TS      int64  `json:"ts"`
}

// MarshalJSON writes the floodgate.decisions message value: times in Unix
// milliseconds, as in events.
func (d Decision) MarshalJSON() ([]byte, error) {
	return json.Marshal(decisionWire{
		Action: d.Action, Kind: d.Kind, Subject: d.Subject, Rule: d.Rule,
		Limit: d.Limit.Count, Window: rules.FormatWindow(d.Limit.Window), Count: d.Count,
		Until: d.Until.UnixMilli(), Shadow: d.Shadow, Message: d.Message, TS: d.TS.UnixMilli(),
	})
}

// UnmarshalJSON reads a floodgate.decisions message value.
func (d *Decision) UnmarshalJSON(data []byte) error {
	var w decisionWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	win, err := rules.ParseWindow(w.Window)
	if err != nil {
		return fmt.Errorf("decision: %w", err)
	}
	*d = Decision{
		Action: w.Action, Kind: w.Kind, Subject: w.Subject, Rule: w.Rule,
		Limit: rules.Limit{Count: w.Limit, Window: win}, Count: w.Count,
		Until: time.UnixMilli(w.Until).UTC(), Shadow: w.Shadow, Message: w.Message,
		TS: time.UnixMilli(w.TS).UTC(),
	}
	return nil
}
