package decide

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/strict"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// Store is what the Limiter reads of the live counters when a check asks
// for exact counts (or when it has no State): one read-only script per
// slot. *window.Store implements it.
type Store interface {
	Evaluate(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64) ([]window.EvalState, error)
}

var _ Store = (*window.Store)(nil)

// Taker runs strict takes; *strict.Taker implements it.
type Taker interface {
	TakeQueued(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64, events []window.QueuedEvent) (taken bool, queued []bool, states []window.EvalState, err error)
}

var _ Taker = (*strict.Taker)(nil)

// Publisher publishes the events of Take. *producer.Publisher implements it.
type Publisher interface {
	Publish(ctx context.Context, events ...event.Event) error
	PublishCounted(ctx context.Context, events ...event.Event) error
}

// FailureMode is the answer given when Redis fails or is slower than the
// timeout.
type FailureMode int

const (
	// FailOpen allows the request (availability first). The default.
	FailOpen FailureMode = iota
	// FailClosed denies the request (protection first).
	FailClosed
)

// ParseFailureMode parses "open" or "closed".
func ParseFailureMode(s string) (FailureMode, error) {
	switch s {
	case "open":
		return FailOpen, nil
	case "closed":
		return FailClosed, nil
	}
	return 0, fmt.Errorf("failure mode %q: want open or closed", s)
}

func (m FailureMode) String() string {
	if m == FailClosed {
		return "closed"
	}
	return "open"
}

// Defaults of Config.
const (
	DefaultTimeout     = 50 * time.Millisecond
	DefaultMaxSubjects = 16
	// degradedRetry is the retry time of a denial in closed failure mode.
	degradedRetry = time.Second
)

// Config configures a Limiter.
type Config struct {
	// Store answers exact checks from Redis. Required.
	Store Store
	// Taker runs strict takes. Nil: Take is refused for strict rules (and
	// counts nothing in Redis for the others, which the aggregator counts).
	Taker Taker
	// State answers checks from memory (Sync keeps it). Nil: every check
	// reads Redis, as an exact check does.
	State *State
	// Partitions returns the events topic's partition count: the limiter
	// is ready once State holds a snapshot of every partition. Required
	// with State.
	Partitions func() int
	// Rules returns the rules in force (reload.Watcher.Current). Required.
	Rules func() *rules.Set
	// Publisher receives the events of Take. Nil: Take counts strict
	// subjects in Redis but publishes nothing (no history, and subjects
	// without strict rules are not counted at all).
	Publisher Publisher
	// Timeout bounds each Redis round trip. Default 50ms.
	Timeout time.Duration
	// FailureMode is the answer when Redis fails or times out. Default
	// FailOpen.
	FailureMode FailureMode
	// MaxSubjects bounds the subjects of one request (and the descriptors
	// of one RLS call), before any work: past it only the first MaxSubjects
	// are decided, a denial among them is the answer, and otherwise the
	// request is refused. Default 16.
	MaxSubjects int
	// DescriptorLimits: the Taker decides strict takes with the limits it
	// is handed (strict.Taker, the limiter's own script), so an RLS take's
	// descriptor limit can replace the count of the subject's strict limit
	// of the same window, exactly. False (owner takes re-plan a take from
	// their own rules): descriptor limits are ignored, counted and logged.
	DescriptorLimits bool
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the limiter's metrics. Nil: not registered.
	Registerer prometheus.Registerer
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("limiter: nil store")
	case c.Rules == nil:
		return errors.New("limiter: no rules source")
	case c.State != nil && c.Partitions == nil:
		return errors.New("limiter: a state needs the partition count")
	case c.Timeout < 0:
		return fmt.Errorf("limiter: timeout %s is negative", c.Timeout)
	case c.FailureMode != FailOpen && c.FailureMode != FailClosed:
		return fmt.Errorf("limiter: unknown failure mode %d", c.FailureMode)
	case c.MaxSubjects < 0:
		return fmt.Errorf("limiter: max subjects %d is negative", c.MaxSubjects)
	}
	return nil
}

// Limiter decides. It is safe for concurrent use; its three surfaces
// (Connect, HTTP, Envoy RLS) all call Check and Take.
type Limiter struct {
	cfg     Config
	timeout time.Duration
	maxSubj int
	now     func() time.Time
	log     *slog.Logger
	// descWarned holds the reasons a descriptor limit was ignored that
	// were logged (rlslimit.go).
	descWarned sync.Map
	m          *metrics
	// degradedLog throttles the failure mode's WARN to one a second: a
	// Redis outage, or an owner's partitions moving (aggregator
	// --owner-takes), would otherwise log every request, as fast as
	// clients send them. The metrics count each one.
	degradedLog struct {
		mu         sync.Mutex
		last       time.Time
		suppressed int
	}
}

// New validates cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{cfg: cfg, timeout: cfg.Timeout, maxSubj: cfg.MaxSubjects, now: cfg.Now, log: cfg.Logger, m: newMetrics()}
	if l.timeout == 0 {
		l.timeout = DefaultTimeout
	}
	if l.maxSubj == 0 {
		l.maxSubj = DefaultMaxSubjects
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if cfg.State != nil {
		st := cfg.State
		l.m.state = []prometheus.Collector{
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "floodgate_limiter_state_subjects",
				Help: "Subjects at half a limit or more held in memory (checks of all others are allowed without Redis while the state is complete).",
			}, func() float64 { return float64(st.Len()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "floodgate_limiter_state_cap",
				Help: "Bound on the subjects held in memory (--state-max-subjects); 0 for none.",
			}, func() float64 { return float64(st.Cap()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "floodgate_limiter_state_overflow_total",
				Help: "Subject states the cap left out of memory or evicted: checks of subjects not held read Redis until they expire.",
			}, func() float64 { return float64(st.Overflows()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "floodgate_limiter_state_complete",
				Help: "1 while every state that says something is held in memory; 0 past the cap (checks of subjects not held read Redis).",
			}, func() float64 {
				if st.Complete(l.now()) {
					return 1
				}
				return 0
			}),
		}
	}
	// Every rule's series from the start, at zero: a rate over them is
	// defined before the first decision.
	l.m.rules.index(cfg.Rules(), cfg.Rules)
	if cfg.Registerer != nil {
		if err := l.m.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("limiter: register metrics: %w", err)
		}
	}
	return l, nil
}

// Check decides whether req may happen now, from memory (no Redis round
// trip), or with req.Exact from Redis. It counts nothing. An overlong or
// unprintable subject is decided on its digest (event.CanonicalSubject);
// another invalid part is an error only when none of the valid subjects
// is denied. Errors are *Error (CodeInvalid, matching limitapi.ErrRefused);
// Redis failures are answered from memory, then by the failure mode, not
// returned.
func (l *Limiter) Check(ctx context.Context, req Request) (Decision, error) {
	return l.decide(ctx, req, false, nil)
}

// Take decides like an exact Check with N events and, when allowed, counts
// them: subjects with a strict rule are counted in Redis atomically with
// the check (zero overshoot) and published with the event.HeaderCounted
// header; the other subjects are published for the aggregator to count. A
// denied Take counts and publishes nothing.
func (l *Limiter) Take(ctx context.Context, req Request) (Decision, error) {
	return l.decide(ctx, req, true, nil)
}

// Ready reports whether rules are loaded and the limiter can answer: its
// State holds every partition's snapshot, or (without a State) Redis
// answers in time. A failure is a *NotReadyError.
func (l *Limiter) Ready(ctx context.Context) error {
	if l.cfg.Rules() == nil {
		return &NotReadyError{Dependency: "rules", Err: errors.New("no rules loaded")}
	}
	if l.cfg.State != nil {
		if n := l.cfg.Partitions(); !l.cfg.State.Loaded(n) {
			return &NotReadyError{Dependency: "state", Err: fmt.Errorf("decision state not loaded yet (%d partitions)", n)}
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(l.timeout, time.Second))
	defer cancel()
	// A read of one subject with no limits: a script run, so Redis answers.
	ping := []window.EvalQuery{{Subject: window.Subject{Action: "ready", Kind: "ready", Subject: "ready"}}}
	if _, err := l.cfg.Store.Evaluate(ctx, l.now(), ping, 1); err != nil {
		return &NotReadyError{Dependency: "redis", Err: err}
	}
	return nil
}

// NotReadyError says which dependency keeps the limiter from being ready.
// /readyz shows only Dependency: Err may hold internal addresses (a Redis
// dial error does), which go to the log.
type NotReadyError struct {
	Dependency string // "rules", "state" or "redis"
	Err        error
}

func (e *NotReadyError) Error() string { return e.Dependency + ": " + e.Err.Error() }

func (e *NotReadyError) Unwrap() error { return e.Err }

// decide is Check (take false) and Take. surfaceBad is a problem the
// surface found in the part of the request it did not pass on (an RLS
// call's descriptors past the bound): refused like validate's own, unless
// a subject decided is denied.
func (l *Limiter) decide(ctx context.Context, req Request, take bool, surfaceBad error) (Decision, error) {
	return l.decideWith(ctx, req, take, surfaceBad, nil)
}

// decideWith is decide with the limits an RLS call's descriptors carry.
func (l *Limiter) decideWith(ctx context.Context, req Request, take bool, surfaceBad error, dl []descriptorLimit) (Decision, error) {
	op := "check"
	if take {
		op = "take"
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up before the work began: nobody waits.
		return Decision{}, fmt.Errorf("%s: %w", op, context.Cause(ctx))
	}
	set := l.cfg.Rules()
	subs, bad, err := l.validate(set, req, take, surfaceBad)
	if err != nil {
		l.m.invalid.WithLabelValues(op).Inc()
		return Decision{}, err
	}
	now := l.now()
	// validate gave the subjects as the aggregator counts them, so lookups,
	// strict counts and published events name them alike. A subject named
	// twice (ip=a&ip=a, query and body, repeated Envoy descriptor entries,
	// two addresses of one prefix, two spellings of an e-mail) is one
	// subject: decided, counted and published once.
	req.Subjects = dedupSubjects(subs)
	l.m.subjects.Add(float64(len(req.Subjects)))
	plans, others := planSubjects(set, req)
	if len(dl) > 0 {
		l.applyDescriptorLimits(plans, dl, take)
	}
	n := max(req.N, 1)
	if bad == nil && take {
		bad = fitsAtAll(plans, n)
	}
	if bad != nil {
		return l.refuse(ctx, op, req, set, plans, now, take, bad)
	}
	d := Decision{Allowed: true, Time: now}
	if len(plans) == 0 {
		// Unknown action or kinds: no limits apply.
		l.m.checks.WithLabelValues(op, "allowed").Inc()
		if take {
			l.publish(ctx, req.Action, nil, l.events(req, now, others))
		}
		return d, nil
	}
	var views []view
	var tk *takeRun
	switch {
	case take:
		tk = l.newTakeRun(req, now, plans)
		views, err = l.readRedis(ctx, op, req.Action, set, plans, now, n, tk)
	case req.Exact || l.cfg.State == nil:
		views, err = l.readRedis(ctx, op, req.Action, set, plans, now, 1, nil)
	default:
		var complete bool
		if views, complete = l.readMemory(req.Action, plans, now); complete {
			l.m.memory.Inc()
		} else {
			// Past the state's cap a subject it does not hold may be over
			// a limit: read them all from Redis, as an exact check does.
			l.m.overflowReads.Inc()
			views, err = l.readRedis(ctx, op, req.Action, set, plans, now, 1, nil)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			// The caller gave up: nobody waits for an answer.
			return Decision{}, fmt.Errorf("%s %s: %w", op, req.Action, context.Cause(ctx))
		}
		return l.degraded(ctx, op, req, plans, d, err), nil
	}
	deny := assemble(&d, plans, views, now)
	deny = pick(deny, banDenial(plans, views, now))
	return l.finish(ctx, op, req, set, d, deny, plans, others, tk), nil
}

// takeRun is a take's part of a Redis read: the counted subjects' events,
// handed to the take stream with the count when Taker can queue them, and
// what the take did.
type takeRun struct {
	strict  int           // subjects the take counts (with a strict rule)
	counted []event.Event // their events; none without a Publisher
	queue   []window.QueuedEvent
	taken   bool
	queued  []bool // which counted events are in a take stream: not published here
}

// newTakeRun prepares a take's counted events. Without a Publisher nothing
// is published, so nothing is queued either.
func (l *Limiter) newTakeRun(req Request, now time.Time, plans []plan) *takeRun {
	tk := &takeRun{}
	var subs []Subject
	for i := range plans {
		if plans[i].strict {
			subs = append(subs, plans[i].sub)
		}
	}
	tk.strict = len(subs)
	tk.counted = l.events(req, now, subs)
	for _, e := range tk.counted {
		v, err := event.Encode(e)
		if err != nil {
			// Published by the Publisher, whose error says why.
			tk.queue = nil
			break
		}
		tk.queue = append(tk.queue, window.QueuedEvent{Key: []byte(e.Key()), Value: v, ID: e.ID})
	}
	return tk
}

// plan is one subject with its matching rules.
type plan struct {
	sub    Subject
	limits []planLimit
	strict bool
}

type planLimit struct {
	rule        *rules.Rule
	limit       rules.Limit   // for a bucket: Count is the burst
	bucket      *rules.Bucket // set for the rule's bucket
	allowlisted bool
	override    *rules.Override // what gave limit its count; nil: the rule
	descriptor  bool            // an RLS descriptor's limit gave it (rlslimit.go)
}

// overrideName names what gave the limit its count, "" for the rule.
func (pl *planLimit) overrideName() string {
	if pl.descriptor {
		return "descriptor"
	}
	return pl.override.Name()
}

// enforced reports whether pl can deny: not shadow, and the rule does not
// allowlist the subject.
func (pl *planLimit) enforced() bool { return !pl.rule.Shadow && !pl.allowlisted }

// planSubjects matches each subject's rules. Subjects without a strict rule
// are returned apart too: a take publishes them uncounted.
func planSubjects(set *rules.Set, req Request) (plans []plan, others []Subject) {
	plans = make([]plan, 0, len(req.Subjects))
	for _, s := range req.Subjects {
		p := plan{sub: s}
		matched := set.Match(req.Action, s.Kind)
		n := 0
		for _, r := range matched {
			n += len(r.Limits) // an override changes counts, not how many
			if r.Bucket != nil {
				n++
			}
		}
		// Sized up front: a check sits on the hot path, and growing the
		// slice limit by limit is most of its allocations.
		p.limits = make([]planLimit, 0, n)
		for _, r := range matched {
			allow := r.Allowed(s.Subject)
			limits, ov := set.Limits(r, s.Kind, s.Subject)
			for _, lim := range limits {
				p.limits = append(p.limits, planLimit{rule: r, limit: lim, allowlisted: allow, override: ov})
			}
			if r.Bucket != nil {
				p.limits = append(p.limits, planLimit{rule: r, limit: rules.Limit{Count: r.Bucket.Burst}, bucket: r.Bucket, allowlisted: allow})
			}
			p.strict = p.strict || r.Strict
		}
		if !p.strict {
			others = append(others, s)
		}
		if len(p.limits) > 0 {
			plans = append(plans, p)
		}
	}
	return plans, others
}

// fitsAtAll refuses a take of n over an enforced limit's count: it never
// fits whatever the window holds, so no retry time would be true.
func fitsAtAll(plans []plan, n int64) error {
	for i := range plans {
		for _, pl := range plans[i].limits {
			if pl.enforced() && n > pl.limit.Count {
				if pl.bucket != nil {
					return invalidf("n=%d exceeds the burst %d of rule %s; it can never be admitted", n, pl.bucket.Burst, pl.rule.Name)
				}
				return invalidf("n=%d exceeds the limit %s of rule %s; it can never be admitted", n, pl.limit, pl.rule.Name)
			}
		}
	}
	return nil
}

// view is what is known of one subject's limits, however it was read.
type view struct {
	deny   *window.Deny // its deny record (Redis reads only)
	ban    *window.Ban  // an operator's ban (bans.go)
	limits []limitView  // per planLimit
}

type limitView struct {
	count int64
	until time.Time // when one more (n for a take) fits; zero: fits now
	// estimated: the subject is under half the limit (absent from memory);
	// count is not known.
	estimated bool
}

// readMemory answers from the State: no round trip. complete is false when
// a subject is neither held nor known to be under half its limits (the
// state is past its cap): the views then hold only what memory knows
// (bans, the subjects held), enough to deny but not to allow.
func (l *Limiter) readMemory(action string, plans []plan, now time.Time) (views []view, complete bool) {
	views, complete = make([]view, len(plans)), true
	for i := range plans {
		p := &plans[i]
		st, ok, known := l.cfg.State.Lookup(window.Subject{Action: action, Kind: p.sub.Kind, Subject: p.sub.Subject}, now)
		if !known {
			// Past the cap: the subject may be over a limit memory left
			// out. The view is still built (its ban, no counts), so a
			// degraded answer keeps what memory does know.
			complete, ok = false, false
		}
		v := view{ban: l.memoryBan(action, p, now), limits: make([]limitView, len(p.limits))}
		for k, pl := range p.limits {
			v.limits[k] = limitView{estimated: true}
			if !ok {
				continue
			}
			if pl.bucket != nil {
				for _, bs := range st.Buckets {
					if bs.Rule == pl.rule.Name {
						v.limits[k] = bucketView(*pl.bucket, bs.TAT, now, 1)
						break
					}
				}
				continue
			}
			for _, ls := range st.Limits {
				if ls.Rule != pl.rule.Name || ls.Limit != pl.limit || !ls.Valid(st.At, now) {
					continue
				}
				lv := limitView{count: ls.Count}
				if ls.Until.After(now) {
					lv.until = ls.Until
				} else {
					// Once the retry time passed, one more fits: the window
					// holds fewer than the limit, whatever it held at At.
					lv.count = min(lv.count, pl.limit.Count-1)
				}
				v.limits[k] = lv
				break
			}
		}
		views[i] = v
	}
	return views, complete
}

// bucketView is a bucket's state at now from its theoretical arrival time:
// the tokens used, and when n more would conform.
func bucketView(b rules.Bucket, tat, now time.Time, n int64) limitView {
	T := b.Interval()
	used := max(tat.Sub(now), 0)
	v := limitView{count: min(int64((used+T-1)/T), b.Burst)}
	if at := maxTime(tat, now).Add(T*time.Duration(n) - T*time.Duration(b.Burst)); at.After(now) {
		v.until = at
	}
	return v
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// readRedis evaluates (or with take, takes) in Redis within the timeout.
// A take (tk set) counts n and records in tk what it did.
func (l *Limiter) readRedis(ctx context.Context, op, action string, set *rules.Set, plans []plan, now time.Time, n int64, tk *takeRun) ([]view, error) {
	qs := make([]window.EvalQuery, len(plans))
	subs := make([]Subject, len(plans))
	for i := range plans {
		subs[i] = plans[i].sub
	}
	values := relatedValues(subs)
	for i := range plans {
		qs[i] = evalQuery(action, set, &plans[i], values)
	}
	rctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	start := time.Now()
	var (
		states []window.EvalState
		err    error
	)
	switch {
	case tk != nil && l.cfg.Taker == nil:
		err = errors.New("no strict taker configured")
	case tk != nil:
		tk.taken, tk.queued, states, err = l.cfg.Taker.TakeQueued(rctx, now, qs, n, tk.queue)
	default:
		states, err = l.cfg.Store.Evaluate(rctx, now, qs, n)
	}
	l.m.redis.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	if err := checkStates(plans, states); err != nil {
		return nil, err
	}
	views := make([]view, len(plans))
	for i, st := range states {
		v := view{deny: st.Deny, ban: st.Ban, limits: make([]limitView, len(plans[i].limits))}
		w, b := 0, 0
		for k, pl := range plans[i].limits {
			if pl.bucket != nil {
				be := st.Buckets[b]
				lv := bucketView(*pl.bucket, be.TAT, now, 0)
				lv.until = be.Until
				v.limits[k] = lv
				b++
				continue
			}
			v.limits[k] = limitView{count: st.Sums[w], until: st.Until[w]}
			w++
		}
		views[i] = v
	}
	return views, nil
}

// checkStates refuses states that do not answer every plan's limits: a
// taker may be a peer across the network, and a short answer must fail
// the request, not the process.
func checkStates(plans []plan, states []window.EvalState) error {
	if len(states) != len(plans) {
		return fmt.Errorf("limiter: %d states answer %d subjects", len(states), len(plans))
	}
	for i, st := range states {
		w, b := 0, 0
		for _, pl := range plans[i].limits {
			if pl.bucket != nil {
				b++
			} else {
				w++
			}
		}
		if len(st.Sums) < w || len(st.Until) < w || len(st.Buckets) < b {
			return fmt.Errorf("limiter: subject %d answered with %d sums, %d retry times and %d buckets for %d window limits and %d buckets", i, len(st.Sums), len(st.Until), len(st.Buckets), w, b)
		}
	}
	return nil
}

// evalQuery is a plan as the store reads it. values are the request's other
// subjects: the related features a distinct limit counts.
func evalQuery(action string, set *rules.Set, p *plan, values map[string]string) window.EvalQuery {
	q := window.EvalQuery{
		Subject:   window.Subject{Action: action, Kind: p.sub.Kind, Subject: p.sub.Subject},
		MaxWindow: set.MaxWindowFor(action, p.sub.Kind),
		Count:     p.strict,
	}
	var last *rules.Rule
	for _, pl := range p.limits {
		enf := pl.enforced()
		if pl.bucket != nil {
			q.Buckets = append(q.Buckets, window.EvalBucket{Rule: pl.rule.Name, Bucket: *pl.bucket, Block: enf})
		} else {
			q.Limits = append(q.Limits, window.EvalLimit{Limit: pl.limit, Distinct: pl.rule.Distinct, Block: enf})
			if d := pl.rule.Distinct; d != "" && values[d] != "" {
				if q.Values == nil {
					q.Values = map[string]string{}
				}
				q.Values[d] = values[d]
			}
		}
		if enf && pl.rule != last {
			q.BlockRules = append(q.BlockRules, pl.rule.Name)
		}
		last = pl.rule
	}
	return q
}

// relatedValues maps each kind of the request to its first subject: the
// features an event of one subject relates to (its attrs).
func relatedValues(subs []Subject) map[string]string {
	m := make(map[string]string, len(subs))
	for _, s := range subs {
		if _, ok := m[s.Kind]; !ok {
			m[s.Kind] = s.Subject
		}
	}
	return m
}

// assemble fills d's limits and shadow denials from the views and returns
// the enforced denial with the longest retry, nil when allowed.
func assemble(d *Decision, plans []plan, views []view, now time.Time) *Denial {
	var deny *Denial
	n := 0
	for i := range plans {
		n += len(plans[i].limits)
	}
	d.Limits = slices.Grow(d.Limits, n)
	for i := range plans {
		deny = pick(deny, decideSubject(d, &plans[i], views[i], now))
	}
	return deny
}

// decideSubject adds one subject's limits to d and returns its enforced
// denial, if any.
func decideSubject(d *Decision, p *plan, v view, now time.Time) *Denial {
	var deny *Denial
	rec := liveRecord(p, v.deny, now)
	if rec != nil {
		den := denial(p, rec.rule, v.deny.Limit, v.deny.Count, v.deny.Until, now)
		if rec.rule.Shadow {
			d.ShadowDenials = append(d.ShadowDenials, den)
		} else {
			deny = pick(deny, &den)
		}
	}
	for k, pl := range p.limits {
		lv := v.limits[k]
		lim := Limit{
			Rule: pl.rule.Name, Kind: p.sub.Kind, Subject: p.sub.Subject,
			Limit: pl.limit.Count, Window: pl.window(), Count: lv.count,
			Remaining: max(pl.limit.Count-lv.count, 0),
			Shadow:    pl.rule.Shadow, Strict: pl.rule.Strict, Allowlisted: pl.allowlisted, Rate: pl.rate(),
			Override: pl.overrideName(),
		}
		if lv.estimated {
			// Under half the limit: at most ceil(L/2)-1 counted.
			lim.Estimated = true
			lim.Remaining = pl.limit.Count - ((pl.limit.Count+1)/2 - 1)
			if pl.bucket != nil {
				lim.Remaining = pl.limit.Count / 2
			}
			lim.ResetAfter = lim.Window
		} else if lv.count > 0 {
			lim.ResetAfter = lim.Window
		}
		if !lv.until.IsZero() {
			lim.Exceeded = true
			lim.ResetAfter = lv.until.Sub(now)
			if !pl.allowlisted {
				den := denial(p, pl.rule, pl.limit, lv.count, lv.until, now)
				if pl.rule.Shadow {
					d.ShadowDenials = append(d.ShadowDenials, den)
				} else {
					deny = pick(deny, &den)
				}
			}
		}
		if rec != nil && rec.rule == pl.rule && v.deny.Limit == pl.limit && (v.deny.Bucket != nil) == (pl.bucket != nil) {
			lim.Exceeded = true
			lim.ResetAfter = max(lim.ResetAfter, v.deny.Until.Sub(now))
		}
		d.Limits = append(d.Limits, lim)
	}
	return deny
}

type record struct{ rule *rules.Rule }

// liveRecord returns the rule of a deny record that still counts: its rule
// is in force, does not allowlist the subject, and the record has not
// ended.
func liveRecord(p *plan, rec *window.Deny, now time.Time) *record {
	if rec == nil || !rec.Until.After(now) {
		return nil
	}
	for _, pl := range p.limits {
		if pl.rule.Name == rec.Rule {
			if pl.allowlisted {
				return nil
			}
			return &record{rule: pl.rule}
		}
	}
	return nil
}

func denial(p *plan, r *rules.Rule, lim rules.Limit, count int64, until, now time.Time) Denial {
	d := Denial{
		Rule: r.Name, Kind: p.sub.Kind, Subject: p.sub.Subject,
		Limit: lim.Count, Window: lim.Window, Count: count,
		Message: r.Message, Until: until, RetryAfter: until.Sub(now), Shadow: r.Shadow,
	}
	if lim.Window == 0 && r.Bucket != nil {
		d.Window, d.Rate = r.Bucket.Refill(), r.Bucket.Rate.String()
	}
	return d
}

// window is what a limit reports as its window: a bucket's refill time.
func (pl *planLimit) window() time.Duration {
	if pl.bucket != nil {
		return pl.bucket.Refill()
	}
	return pl.limit.Window
}

func (pl *planLimit) rate() string {
	if pl.bucket != nil {
		return pl.bucket.Rate.String()
	}
	return ""
}

// finish counts the decision and, for an admitted take (tk set), publishes.
func (l *Limiter) finish(ctx context.Context, op string, req Request, set *rules.Set, d Decision, deny *Denial, plans []plan, others []Subject, tk *takeRun) Decision {
	l.m.rules.count(l.m.rules.index(set, l.cfg.Rules), &d)
	for _, sd := range d.ShadowDenials {
		l.m.shadowDenies.WithLabelValues(sd.Rule).Inc()
	}
	if deny != nil {
		d.Allowed, d.Denial = false, deny
		l.m.checks.WithLabelValues(op, "denied").Inc()
		l.m.denies.WithLabelValues(denyLabel(deny)).Inc()
		return d
	}
	if tk != nil && !tk.taken {
		// The script saw a blocking state the rules here did not (a rules
		// reload between the two): deny without a rule, retry soon.
		d.Allowed = false
		d.Denial = &Denial{Message: "denied by a concurrent rules change; retry", Until: d.Time.Add(time.Second), RetryAfter: time.Second}
		l.m.checks.WithLabelValues(op, "denied").Inc()
		return d
	}
	l.m.checks.WithLabelValues(op, "allowed").Inc()
	if tk != nil {
		afterTake(&d, int64(max(req.N, 1)))
		d.Counted = tk.strict > 0
		if d.Counted {
			l.m.counted.Add(float64(max(req.N, 1)))
		}
		var counted []event.Event
		for i, e := range tk.counted {
			if i < len(tk.queued) && tk.queued[i] {
				l.m.queued.Inc()
				continue
			}
			counted = append(counted, e)
		}
		l.publish(ctx, req.Action, counted, l.events(req, d.Time, others))
	}
	return d
}

// afterTake makes an allowed take's limits say what is left after it: the
// views were read before the n events counted, and a client pacing itself
// on RateLimit headers (Envoy passes them on) would otherwise see one more
// request left than it has.
func afterTake(d *Decision, n int64) {
	for i := range d.Limits {
		lim := &d.Limits[i]
		if lim.Estimated || lim.Allowlisted {
			continue
		}
		lim.Count += n
		lim.Remaining = max(lim.Limit-lim.Count, 0)
		if lim.ResetAfter <= 0 {
			lim.ResetAfter = lim.Window
		}
	}
}

// pick returns the denial with the longer retry.
func pick(a, b *Denial) *Denial {
	if a == nil || (b != nil && b.Until.After(a.Until)) {
		return b
	}
	return a
}

// degraded answers after a Redis failure: what memory holds first (an
// operator's ban, a deny record, a count over a limit deny as they would
// with Redis up), then the failure mode. Without the memory step a client
// that made Redis slow, or sent Floodgate-Exact to every check, was let
// through its bans in open mode.
// warnDegraded logs a failure-mode answer, at most once a second, with how
// many it left out since the last.
func (l *Limiter) warnDegraded(op, action string, err error) {
	t := &l.degradedLog
	t.mu.Lock()
	now := time.Now()
	if now.Sub(t.last) < time.Second {
		t.suppressed++
		t.mu.Unlock()
		return
	}
	suppressed := t.suppressed
	t.last, t.suppressed = now, 0
	t.mu.Unlock()
	l.log.Warn("limiter: redis failed, answering from memory and the failure mode",
		"op", op, "action", action, "mode", l.cfg.FailureMode.String(), "err", err, "not_logged_since_last", suppressed)
}

func (l *Limiter) degraded(ctx context.Context, op string, req Request, plans []plan, d Decision, err error) Decision {
	reason := "error"
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		reason = "timeout"
	}
	l.warnDegraded(op, req.Action, err)
	d.Degraded = true
	if l.cfg.State != nil {
		views, _ := l.readMemory(req.Action, plans, d.Time) // partial past the cap: what it holds still denies
		md := d
		deny := pick(assemble(&md, plans, views, d.Time), banDenial(plans, views, d.Time))
		if deny != nil {
			md.Allowed, md.Denial = false, deny
			l.m.failures.WithLabelValues("memory", reason).Inc()
			l.m.checks.WithLabelValues(op, "degraded_denied").Inc()
			l.m.denies.WithLabelValues(denyLabel(deny)).Inc()
			return md
		}
	}
	strict := false
	if op == "take" {
		set := l.cfg.Rules()
		for _, s := range req.Subjects {
			for _, r := range set.Match(req.Action, s.Kind) {
				strict = strict || r.Strict
			}
		}
	}
	// A strict rule promises zero overshoot: its takes fail closed whatever
	// the mode (the script may even have counted before the timeout).
	if l.cfg.FailureMode == FailClosed || strict {
		d.Allowed = false
		d.Denial = &Denial{Message: "rate limiter unavailable; try again later", Until: d.Time.Add(degradedRetry), RetryAfter: degradedRetry}
		l.m.failures.WithLabelValues("closed", reason).Inc()
		l.m.checks.WithLabelValues(op, "degraded_denied").Inc()
		return d
	}
	l.m.failures.WithLabelValues("open", reason).Inc()
	l.m.checks.WithLabelValues(op, "degraded_allowed").Inc()
	if op == "take" {
		// Not counted in Redis: publish every subject uncounted, so the
		// aggregator counts them when Redis is back.
		l.publish(ctx, req.Action, nil, l.events(req, d.Time, req.Subjects))
	}
	return d
}

// events are Take's events of subs: one per subject, with the request's
// id (per kind when it names several subjects) or a new one. None without
// a Publisher: nothing would publish them.
func (l *Limiter) events(req Request, now time.Time, subs []Subject) []event.Event {
	if len(subs) == 0 || l.cfg.Publisher == nil {
		return nil
	}
	n := max(req.N, 1)
	evs := make([]event.Event, 0, len(subs))
	for i, s := range subs {
		id := req.ID
		if id != "" && len(req.Subjects) > 1 {
			id += "." + s.Kind
			if i > 0 && len(id) > event.MaxIDLen {
				id = ""
			}
		}
		if id == "" || len(id) > event.MaxIDLen {
			id = event.NewID()
		}
		evs = append(evs, event.Event{V: event.Version, ID: id, Action: req.Action, Kind: s.Kind, Subject: s.Subject, TS: now, N: n, Attrs: attrsOf(s, req.Subjects)})
	}
	return evs
}

// publish hands Take's events to the publisher: counted ones with the
// event.HeaderCounted header, the others without. Failures are logged and
// counted; the Redis count stands (docs/limiter.md).
func (l *Limiter) publish(ctx context.Context, action string, counted, others []event.Event) {
	if l.cfg.Publisher == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	if len(counted) > 0 {
		if err := l.cfg.Publisher.PublishCounted(ctx, counted...); err != nil {
			l.m.publishErrors.WithLabelValues("counted").Inc()
			l.log.Error("limiter: publish counted events (Redis holds the count; history may miss them)", "action", action, "err", err)
		}
	}
	if len(others) > 0 {
		if err := l.cfg.Publisher.Publish(ctx, others...); err != nil {
			l.m.publishErrors.WithLabelValues("uncounted").Inc()
			l.log.Error("limiter: publish events", "action", action, "err", err)
		}
	}
}

// attrsOf is the attrs of an event of s: the request's other subjects, one
// per kind (at most event.MaxAttrs), so distinct rules count them.
func attrsOf(s Subject, subs []Subject) map[string]string {
	var m map[string]string
	for _, o := range subs {
		if o.Kind == s.Kind || len(m) == event.MaxAttrs {
			continue
		}
		if m == nil {
			m = map[string]string{}
		}
		if _, ok := m[o.Kind]; !ok {
			m[o.Kind] = o.Subject
		}
	}
	return m
}

// validate checks a request against the event contract and the size
// limits. It returns the request's subjects that can be decided, each as
// event.CanonicalSubject has it (an overlong or unprintable subject is
// decided on its digest), and apart the first problem of the rest of the
// request (bad is for refuse: a denial of a valid subject still wins over
// it; surfaceBad, the surface's own, comes first). err is a request that
// cannot be decided at all: no action, or no subject given.
//
// Its cost is bounded before any work: of a request past MaxSubjects only
// the first MaxSubjects subjects are read (the rest is refused with the
// request), so whatever the request names, the decision looks at most
// MaxSubjects subjects up. An empty subject is none (a header sent empty,
// as /v1/check skips empty parameters): left out on every surface, so it
// neither refuses nor hides the request's other subjects.
func (l *Limiter) validate(set *rules.Set, req Request, take bool, surfaceBad error) (subs []Subject, bad, err error) {
	if req.Action == "" {
		return nil, nil, invalidf("action is required")
	}
	if len(req.Subjects) == 0 {
		return nil, nil, invalidf("no subjects: give at least one kind=subject")
	}
	// An event of the request, to hold its parts to the contract.
	e := event.Event{ID: "x", Action: req.Action, Subject: "x", Kind: "x", TS: time.Unix(1_800_000_000, 0)}
	if err := e.Validate(); err != nil {
		// No rule has an invalid action: nothing could deny.
		return nil, nil, contractError(err)
	}
	given := req.Subjects
	if len(given) > l.maxSubj {
		given = given[:l.maxSubj]
	}
	bad = surfaceBad
	switch {
	case bad != nil:
	case len(req.Subjects) > l.maxSubj:
		bad = invalidf("%d subjects, at most %d (the first %d were decided)", len(req.Subjects), l.maxSubj, l.maxSubj)
	case req.N < 0 || req.N > event.MaxN:
		bad = invalidf("n = %d, want 1..%d", req.N, event.MaxN)
	case take && req.ID != "":
		e.ID = req.ID
		if err := e.Validate(); err != nil {
			bad = contractError(err)
		}
		e.ID = "x"
	}
	// req.Subjects is the caller's: copied on the first change only (a
	// check is on the hot path).
	subs = given
	copied := false
	for i, s := range given {
		if s.Subject == "" {
			if !copied {
				subs = append(make([]Subject, 0, len(given)), given[:i]...)
				copied = true
			}
			continue
		}
		// Each subject as set counts it (rules.Set.Subject: normalized, an
		// IPv6 address of kind ip by its /64), then its digest when it is
		// no valid subject. Normalized first: "victim@x.example\n" is
		// trimmed, where its digest would be a fresh subject.
		c := event.CanonicalSubject(set.Subject(s.Kind, s.Subject))
		e.Kind, e.Subject = s.Kind, c
		err := e.Validate()
		if err != nil && bad == nil {
			// An invalid kind matches no rule (rules hold kinds to the
			// same names), an empty subject is none: neither can deny.
			bad = contractError(err)
		}
		if !copied && (err != nil || c != s.Subject) {
			subs = append(make([]Subject, 0, len(given)), given[:i]...)
			copied = true
		}
		if copied && err == nil {
			subs = append(subs, Subject{Kind: s.Kind, Subject: c})
		}
	}
	if len(subs) == 0 && bad == nil {
		return nil, nil, invalidf("no subjects: every subject given is empty")
	}
	return subs, bad, nil
}

// contractError is an event contract error as the limiter words it.
func contractError(err error) error {
	var ee *event.Error
	if errors.As(err, &ee) {
		return invalidf("%s: %s", fieldName(ee.Field), detail(ee))
	}
	return invalidf("%v", err)
}

// refuse answers a request with an invalid part: a denial of one of its
// valid subjects, as a check would find it (counting nothing), else bad.
// Refusing outright let a subject over its limit through wherever a
// refusal is not a denial: Envoy's default failure_mode_deny: false, a
// middleware that fails open.
func (l *Limiter) refuse(ctx context.Context, op string, req Request, set *rules.Set, plans []plan, now time.Time, take bool, bad error) (Decision, error) {
	l.m.invalid.WithLabelValues(op).Inc()
	if len(plans) == 0 {
		return Decision{}, bad
	}
	// A take reads Redis as it would have: a strict rule's counts reach
	// memory only once the aggregator has the take's event. One round
	// trip of at most the usual size; memory when Redis fails.
	var views []view
	err := errors.New("no redis read")
	if take || req.Exact || l.cfg.State == nil {
		p := plans[:min(len(plans), l.maxSubj)]
		if views, err = l.readRedis(ctx, op, req.Action, set, p, now, 1, nil); err == nil {
			plans = p
		}
	}
	if err != nil {
		if l.cfg.State == nil {
			return Decision{}, bad
		}
		views, _ = l.readMemory(req.Action, plans, now)
	}
	d := Decision{Allowed: true, Time: now}
	deny := pick(assemble(&d, plans, views, now), banDenial(plans, views, now))
	if deny == nil {
		return Decision{}, bad
	}
	return l.finish(ctx, op, req, set, d, deny, plans, nil, nil), nil
}

func fieldName(f string) string {
	if f == "" {
		return "request"
	}
	return f
}

func detail(e *event.Error) string {
	if e.Detail != "" {
		return e.Detail
	}
	return e.Reason
}

// dedupScan is the most subjects dedupSubjects compares pairwise (at most
// 120 comparisons, cheaper than a map); more go through a map, so that the
// cost stays linear whatever MaxSubjects is set to.
const dedupScan = 16

// dedupSubjects returns subs without repeated (kind, subject) pairs, in
// first-seen order. subs itself is not modified.
func dedupSubjects(subs []Subject) []Subject {
	if len(subs) > dedupScan {
		return dedupMap(subs)
	}
	for i := 1; i < len(subs); i++ {
		for j := 0; j < i; j++ {
			if subs[i] == subs[j] {
				return dedupFrom(subs, i)
			}
		}
	}
	return subs
}

// dedupFrom copies subs without duplicates; subs[:i] has none.
func dedupFrom(subs []Subject, i int) []Subject {
	out := append(make([]Subject, 0, len(subs)-1), subs[:i]...)
next:
	for _, s := range subs[i+1:] {
		for _, o := range out {
			if s == o {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

// dedupMap is dedupSubjects through a set: linear in len(subs).
func dedupMap(subs []Subject) []Subject {
	seen := make(map[Subject]struct{}, len(subs))
	var out []Subject
	for i, s := range subs {
		if _, dup := seen[s]; dup {
			if out == nil {
				out = append(make([]Subject, 0, len(subs)-1), subs[:i]...)
			}
			continue
		}
		seen[s] = struct{}{}
		if out != nil {
			out = append(out, s)
		}
	}
	if out == nil {
		return subs
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
