package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"floodgate/event"
	"floodgate/rules"
	"floodgate/window"
)

// Store is what the Limiter needs of the live counters: one round trip per
// call for all subjects. *window.Store implements it.
type Store interface {
	Evaluate(ctx context.Context, now time.Time, qs []window.EvalQuery) ([]window.EvalState, error)
	Take(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64) (bool, []window.EvalState, error)
}

var _ Store = (*window.Store)(nil)

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
	DefaultCacheSize   = 100_000
	DefaultCacheTTL    = 10 * time.Second
	DefaultMaxSubjects = 16
	// degradedRetry is the retry time of a denial in closed failure mode.
	degradedRetry = time.Second
)

// Config configures a Limiter.
type Config struct {
	// Store holds the live counters and deny records. Required.
	Store Store
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
	// CacheSize bounds the in-process cache of deny decisions (entries).
	// Default 100000; negative disables the cache.
	CacheSize int
	// CacheTTL caps how long a cached denial is used (it is used at most
	// until the denial ends): a deny record deleted in Redis stops denying
	// within CacheTTL. Default 10s.
	CacheTTL time.Duration
	// MaxSubjects bounds the subjects of one request. Default 16.
	MaxSubjects int
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
	case c.Timeout < 0:
		return fmt.Errorf("limiter: timeout %s is negative", c.Timeout)
	case c.FailureMode != FailOpen && c.FailureMode != FailClosed:
		return fmt.Errorf("limiter: unknown failure mode %d", c.FailureMode)
	case c.CacheTTL < 0:
		return fmt.Errorf("limiter: cache ttl %s is negative", c.CacheTTL)
	case c.MaxSubjects < 0:
		return fmt.Errorf("limiter: max subjects %d is negative", c.MaxSubjects)
	}
	return nil
}

// Limiter decides. It is safe for concurrent use; its three surfaces
// (Connect, HTTP, Envoy RLS) all call Check and Take.
type Limiter struct {
	store   Store
	rules   func() *rules.Set
	pub     Publisher
	timeout time.Duration
	mode    FailureMode
	maxSubj int
	now     func() time.Time
	log     *slog.Logger
	cache   *denyCache
	m       *metrics
}

// New validates cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{
		store:   cfg.Store,
		rules:   cfg.Rules,
		pub:     cfg.Publisher,
		timeout: cfg.Timeout,
		mode:    cfg.FailureMode,
		maxSubj: cfg.MaxSubjects,
		now:     cfg.Now,
		log:     cfg.Logger,
		m:       newMetrics(),
	}
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
	size := cfg.CacheSize
	if size == 0 {
		size = DefaultCacheSize
	}
	if size > 0 {
		ttl := cfg.CacheTTL
		if ttl == 0 {
			ttl = DefaultCacheTTL
		}
		l.cache = newDenyCache(size, ttl)
		l.m.cacheSize = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "floodgate_limiter_cache_entries",
			Help: "Deny decisions held in the in-process cache.",
		}, func() float64 { return float64(l.cache.len()) })
	}
	if cfg.Registerer != nil {
		if err := l.m.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("limiter: register metrics: %w", err)
		}
	}
	return l, nil
}

// Check reads the counters and deny records of the request's subjects (one
// Redis round trip, none when a subject's denial is cached) and decides.
// It counts nothing. Errors are *Error (CodeInvalid); Redis failures are
// answered by the failure mode, not returned.
func (l *Limiter) Check(ctx context.Context, req Request) (Decision, error) {
	return l.decide(ctx, req, false)
}

// Take decides like Check with N events and, when allowed, counts them:
// subjects with a strict rule are counted in Redis atomically with the
// check (one script run, zero overshoot) and published with the
// event.HeaderCounted header; the other subjects are published for the
// aggregator to count. A denied Take counts and publishes nothing.
func (l *Limiter) Take(ctx context.Context, req Request) (Decision, error) {
	return l.decide(ctx, req, true)
}

// Ready reports whether rules are loaded and Redis answers in time.
func (l *Limiter) Ready(ctx context.Context) error {
	if l.rules() == nil {
		return errors.New("no rules loaded")
	}
	ctx, cancel := context.WithTimeout(ctx, max(l.timeout, time.Second))
	defer cancel()
	if _, err := l.store.Evaluate(ctx, l.now(), nil); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// plan is one subject with its matching rules, as sent to the store.
type plan struct {
	sub    Subject
	limits []planLimit
	strict bool
}

type planLimit struct {
	rule        *rules.Rule
	limit       rules.Limit
	allowlisted bool
}

// enforced reports whether pl can deny: not shadow, and the rule does not
// allowlist the subject.
func (pl *planLimit) enforced() bool { return !pl.rule.Shadow && !pl.allowlisted }

func (l *Limiter) decide(ctx context.Context, req Request, take bool) (Decision, error) {
	op := "check"
	if take {
		op = "take"
	}
	if err := l.validate(&req, take); err != nil {
		l.m.invalid.WithLabelValues(op).Inc()
		return Decision{}, err
	}
	// A subject named twice (ip=a&ip=a, query and body, repeated Envoy
	// descriptor entries) is one subject: decided, counted and published
	// once.
	req.Subjects = dedupSubjects(req.Subjects)
	now := l.now()
	set := l.rules()
	plans := make([]plan, 0, len(req.Subjects))
	var others []Subject // subjects without strict rules, published uncounted
	for _, s := range req.Subjects {
		matched := set.Match(req.Action, s.Kind)
		p := plan{sub: s}
		for _, r := range matched {
			allow := r.Allowed(s.Subject)
			for _, lim := range r.Limits {
				p.limits = append(p.limits, planLimit{rule: r, limit: lim, allowlisted: allow})
			}
			if r.Strict {
				p.strict = true
			}
		}
		if !p.strict {
			others = append(others, s)
		}
		if len(p.limits) > 0 {
			plans = append(plans, p)
		}
	}
	n := max(req.N, 1)
	if take && n > 1 {
		// n over an enforced limit's count never fits, whatever the
		// window holds: no retry time would be true.
		for i := range plans {
			for _, pl := range plans[i].limits {
				if pl.enforced() && n > pl.limit.Count {
					l.m.invalid.WithLabelValues(op).Inc()
					return Decision{}, invalidf("n=%d exceeds the limit %s of rule %s; it can never be admitted", n, pl.limit, pl.rule.Name)
				}
			}
		}
	}
	d := Decision{Allowed: true, Time: now}
	if len(plans) == 0 {
		// Unknown action or kinds: no limits apply.
		l.m.checks.WithLabelValues(op, "allowed").Inc()
		if take {
			l.publish(ctx, req, now, nil, others)
		}
		return d, nil
	}

	if l.cache != nil {
		// Of the cached denials, the one with the longest retry, as an
		// answer from Redis would report.
		var cached *Denial
		for i := range plans {
			if den, ok := l.cache.get(cacheKey(req.Action, plans[i].sub), set, now); ok {
				cached = pick(cached, &den)
			}
		}
		if cached != nil {
			cached.RetryAfter = cached.Until.Sub(now)
			l.m.cacheHits.Inc()
			l.m.checks.WithLabelValues(op, "denied").Inc()
			l.m.denies.WithLabelValues(cached.Rule).Inc()
			d.Allowed, d.Denial, d.Cached = false, cached, true
			return d, nil
		}
		l.m.cacheMisses.Inc()
	}

	qs := make([]window.EvalQuery, len(plans))
	for i := range plans {
		p := &plans[i]
		q := window.EvalQuery{
			Subject:   window.Subject{Action: req.Action, Kind: p.sub.Kind, Subject: p.sub.Subject},
			MaxWindow: set.MaxWindowFor(req.Action, p.sub.Kind),
			Limits:    make([]window.EvalLimit, len(p.limits)),
			Count:     p.strict,
		}
		var last *rules.Rule
		for k, pl := range p.limits {
			enf := pl.enforced()
			q.Limits[k] = window.EvalLimit{Limit: pl.limit, Block: enf}
			if enf && pl.rule != last {
				q.BlockRules = append(q.BlockRules, pl.rule.Name)
			}
			last = pl.rule
		}
		qs[i] = q
	}
	rctx, cancel := context.WithTimeout(ctx, l.timeout)
	start := time.Now()
	var (
		states []window.EvalState
		taken  bool
		err    error
	)
	if take {
		taken, states, err = l.store.Take(rctx, now, qs, n)
	} else {
		states, err = l.store.Evaluate(rctx, now, qs)
	}
	cancel()
	l.m.redis.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		if ctx.Err() != nil {
			// The caller gave up: nobody waits for an answer.
			return Decision{}, fmt.Errorf("%s %s: %w", op, req.Action, context.Cause(ctx))
		}
		return l.degraded(ctx, op, req, d, err), nil
	}

	var deny *Denial
	for i := range plans {
		p := &plans[i]
		st := states[i]
		var subjDeny *Denial
		var rec *rules.Rule
		if st.Deny != nil {
			recAllowed := false
			for _, pl := range p.limits {
				if pl.rule.Name == st.Deny.Rule {
					rec, recAllowed = pl.rule, pl.allowlisted
					break
				}
			}
			// A record of a rule that is gone, or that now allowlists the
			// subject, does not count.
			if rec != nil && !recAllowed {
				den := Denial{
					Rule: rec.Name, Kind: p.sub.Kind, Subject: p.sub.Subject,
					Limit: st.Deny.Limit.Count, Window: st.Deny.Limit.Window, Count: st.Deny.Count,
					Message: rec.Message, Until: st.Deny.Until, RetryAfter: st.Deny.Until.Sub(now), Shadow: rec.Shadow,
				}
				if den.RetryAfter > 0 {
					if rec.Shadow {
						d.ShadowDenials = append(d.ShadowDenials, den)
					} else {
						subjDeny = pick(subjDeny, &den)
					}
				} else {
					rec = nil
				}
			} else {
				rec = nil
			}
		}
		for k, pl := range p.limits {
			count := st.Sums[k]
			lim := Limit{
				Rule: pl.rule.Name, Kind: p.sub.Kind, Subject: p.sub.Subject,
				Limit: pl.limit.Count, Window: pl.limit.Window, Count: count,
				Remaining: max(pl.limit.Count-count, 0),
				Shadow:    pl.rule.Shadow, Strict: pl.rule.Strict, Allowlisted: pl.allowlisted,
			}
			if count > 0 {
				lim.ResetAfter = pl.limit.Window
			}
			if u := st.Until[k]; !u.IsZero() {
				lim.Exceeded = true
				lim.ResetAfter = u.Sub(now)
				if !pl.allowlisted {
					den := Denial{
						Rule: pl.rule.Name, Kind: p.sub.Kind, Subject: p.sub.Subject,
						Limit: pl.limit.Count, Window: pl.limit.Window, Count: count,
						Message: pl.rule.Message, Until: u, RetryAfter: u.Sub(now), Shadow: pl.rule.Shadow,
					}
					if pl.rule.Shadow {
						d.ShadowDenials = append(d.ShadowDenials, den)
					} else {
						subjDeny = pick(subjDeny, &den)
					}
				}
			}
			if rec == pl.rule && st.Deny.Limit == pl.limit {
				lim.Exceeded = true
				lim.ResetAfter = max(lim.ResetAfter, st.Deny.Until.Sub(now))
			}
			d.Limits = append(d.Limits, lim)
		}
		if subjDeny != nil {
			if l.cache != nil && n == 1 {
				// A denial of n > 1 slots ends later than one of a single
				// slot: only single-slot denials are cached.
				l.cache.put(cacheKey(req.Action, p.sub), *subjDeny, set, now)
			}
			deny = pick(deny, subjDeny)
		}
	}
	for _, sd := range d.ShadowDenials {
		l.m.shadowDenies.WithLabelValues(sd.Rule).Inc()
	}
	if deny != nil {
		d.Allowed, d.Denial = false, deny
		l.m.checks.WithLabelValues(op, "denied").Inc()
		l.m.denies.WithLabelValues(deny.Rule).Inc()
		return d, nil
	}
	if take && !taken {
		// The script saw a blocking state the rules here did not (a rules
		// reload between the two): deny without a rule, retry soon.
		d.Allowed = false
		d.Denial = &Denial{Message: "denied by a concurrent rules change; retry", Until: now.Add(time.Second), RetryAfter: time.Second}
		l.m.checks.WithLabelValues(op, "denied").Inc()
		return d, nil
	}
	l.m.checks.WithLabelValues(op, "allowed").Inc()
	if take {
		var counted []Subject
		for i := range plans {
			if plans[i].strict {
				counted = append(counted, plans[i].sub)
			}
		}
		d.Counted = len(counted) > 0
		if d.Counted {
			l.m.counted.Add(float64(n))
		}
		l.publish(ctx, req, now, counted, others)
	}
	return d, nil
}

// pick returns the denial with the longer retry.
func pick(a, b *Denial) *Denial {
	if a == nil || (b != nil && b.Until.After(a.Until)) {
		return b
	}
	return a
}

// degraded answers with the failure mode after a Redis failure.
func (l *Limiter) degraded(ctx context.Context, op string, req Request, d Decision, err error) Decision {
	reason := "error"
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		reason = "timeout"
	}
	l.log.Warn("limiter: redis failed, answering with the failure mode",
		"op", op, "action", req.Action, "mode", l.mode.String(), "err", err)
	d.Degraded = true
	strict := false
	if op == "take" {
		set := l.rules()
		for _, s := range req.Subjects {
			for _, r := range set.Match(req.Action, s.Kind) {
				strict = strict || r.Strict
			}
		}
	}
	// A strict rule promises zero overshoot: its takes fail closed whatever
	// the mode (the script may even have counted before the timeout).
	if l.mode == FailClosed || strict {
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
		l.publish(ctx, req, d.Time, nil, req.Subjects)
	}
	return d
}

// publish hands Take's events to the publisher: counted subjects with the
// event.HeaderCounted header, the others without. Failures are logged and
// counted; the Redis count stands (docs/limiter.md).
func (l *Limiter) publish(ctx context.Context, req Request, now time.Time, counted, others []Subject) {
	if l.pub == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	n := max(req.N, 1)
	mk := func(subs []Subject) []event.Event {
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
			evs = append(evs, event.Event{V: event.Version, ID: id, Action: req.Action, Kind: s.Kind, Subject: s.Subject, TS: now, N: n})
		}
		return evs
	}
	if len(counted) > 0 {
		if err := l.pub.PublishCounted(ctx, mk(counted)...); err != nil {
			l.m.publishErrors.WithLabelValues("counted").Inc()
			l.log.Error("limiter: publish counted events (Redis holds the count; history may miss them)", "action", req.Action, "err", err)
		}
	}
	if len(others) > 0 {
		if err := l.pub.Publish(ctx, mk(others)...); err != nil {
			l.m.publishErrors.WithLabelValues("uncounted").Inc()
			l.log.Error("limiter: publish events", "action", req.Action, "err", err)
		}
	}
}

// validate checks a request against the event contract, so that every
// Take can be published, and the size limits.
func (l *Limiter) validate(req *Request, take bool) error {
	if req.Action == "" {
		return invalidf("action is required")
	}
	if len(req.Subjects) == 0 {
		return invalidf("no subjects: give at least one kind=subject")
	}
	if len(req.Subjects) > l.maxSubj {
		return invalidf("%d subjects, at most %d", len(req.Subjects), l.maxSubj)
	}
	if req.N < 0 || req.N > event.MaxN {
		return invalidf("n = %d, want 1..%d", req.N, event.MaxN)
	}
	if req.ID != "" && !take {
		req.ID = ""
	}
	ts := time.Unix(1_800_000_000, 0)
	for _, s := range req.Subjects {
		e := event.Event{ID: "x", Action: req.Action, Kind: s.Kind, Subject: s.Subject, TS: ts}
		if req.ID != "" {
			e.ID = req.ID
		}
		if err := e.Validate(); err != nil {
			var ee *event.Error
			if errors.As(err, &ee) {
				return invalidf("%s: %s", fieldName(ee.Field), detail(ee))
			}
			return invalidf("%v", err)
		}
	}
	return nil
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

// dedupSubjects returns subs without repeated (kind, subject) pairs, in
// first-seen order. subs itself is not modified.
func dedupSubjects(subs []Subject) []Subject {
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

func cacheKey(action string, s Subject) string {
	return action + "\x00" + s.Kind + "\x00" + s.Subject
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
