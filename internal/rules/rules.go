package rules

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/internal/timespan"
)

// MaxWindow is the longest window a limit may have. Hour buckets make a
// window of D days cost about 24*D hash fields per read; a week keeps a check
// well under a millisecond.
const MaxWindow = 7 * 24 * time.Hour

// Limit is "Count events per Window": a sliding window of whole seconds.
// Count events inside any window are allowed; the event that makes the count
// Count+1 is the first one over the limit ("5/1m": five allowed, the sixth
// denied).
type Limit struct {
	Count  int64
	Window time.Duration
}

// Bucket is a token bucket with burst, enforced as GCRA (the generic cell
// rate algorithm: one theoretical arrival time per subject): tokens refill
// at Rate, at most Burst are held, each event takes one. Burst events may
// come at once; after that, one per Interval.
type Bucket struct {
	Rate  Limit // refill rate: Rate.Count tokens per Rate.Window
	Burst int64 // most tokens held
}

// Interval is the time one token takes to refill, to the microsecond.
func (b Bucket) Interval() time.Duration {
	return (b.Rate.Window / time.Duration(b.Rate.Count)).Truncate(time.Microsecond)
}

// Refill is the time an empty bucket takes to fill: how long a subject's
// bucket state matters after its last event.
func (b Bucket) Refill() time.Duration { return b.Interval() * time.Duration(b.Burst) }

// String is the bucket in the rules file syntax: "{rate: 10/1s, burst: 50}".
func (b Bucket) String() string {
	return "{rate: " + b.Rate.String() + ", burst: " + strconv.FormatInt(b.Burst, 10) + "}"
}

// MaxDistinct bounds what a distinct rule may count: its limits must stay
// below it, and each subject keeps at most this many values (the newest),
// so a count is exact whenever it matters to a limit.
const MaxDistinct = 10_000

// String returns the limit in the rules file syntax, with the window in its
// largest whole unit: "5/1m", "2/1s", "100/1d", "10/30s", "90/90s".
func (l Limit) String() string { return strconv.FormatInt(l.Count, 10) + "/" + FormatWindow(l.Window) }

// ParseLimit parses "<count>/<window>", the window a duration of whole
// seconds (docs/operations.md "Times and durations") or a bare unit meaning
// one of it: "2/s", "5/m", "5/1m", "10/30s", "50/5m", "100/d", "9/1h30m".
func ParseLimit(s string) (Limit, error) {
	count, win, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Limit{}, fmt.Errorf("limit %q: want <count>/<window>, e.g. 5/1m", s)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(count), 10, 64)
	if err != nil || n < 1 {
		return Limit{}, fmt.Errorf("limit %q: count must be a whole number >= 1", s)
	}
	w, err := ParseWindow(win)
	if err != nil {
		return Limit{}, fmt.Errorf("limit %q: %w", s, err)
	}
	return Limit{Count: n, Window: w}, nil
}

// windowWant is what a window may be, for error messages.
const windowWant = "want whole seconds from 1s to 7d, e.g. 30s, 5m, 1h30m, 1d"

// ParseWindow parses a window: a duration (timespan) of whole seconds in
// [1s, MaxWindow], or a bare unit s, m, h, d or w meaning one of it ("m" is
// 1m). Deny records store windows as FormatWindow writes them and are read
// back here.
func ParseWindow(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("window is empty: %s", windowWant)
	}
	in := s
	switch s {
	case "s", "m", "h", "d", "w":
		in = "1" + s
	}
	w, err := timespan.ParseDuration(in)
	if err != nil {
		var se *timespan.SyntaxError
		if errors.As(err, &se) {
			return 0, fmt.Errorf("window %q: %s; %s", s, se.Reason, windowWant)
		}
		return 0, fmt.Errorf("window %q: %w", s, err)
	}
	switch {
	case w < time.Second:
		return 0, fmt.Errorf("window %q: shorter than 1s; %s", s, windowWant)
	case w%time.Second != 0:
		return 0, fmt.Errorf("window %q: not a whole number of seconds; %s", s, windowWant)
	case w > MaxWindow:
		return 0, fmt.Errorf("window %q: longer than the maximum %s", s, FormatWindow(MaxWindow))
	}
	return w, nil
}

// FormatWindow writes w in its largest whole unit: 1d, 6h, 5m, 90s — the
// spelling of deny records, which window/lua.go's fg_fmt_window writes too.
func FormatWindow(w time.Duration) string { return timespan.FormatWindow(w) }

// Rule limits one action for subjects of some feature kinds. Every subject
// is counted on its own: the rule for action "login_failed" and kinds [ip,
// email] keeps one counter per IP and one per e-mail address.
type Rule struct {
	Name   string   // unique in the file; labels metrics, deny records and decisions
	Action string   // the event action it limits
	Kinds  []string // the feature kinds it applies to
	Limits []Limit  // all enforced together; sorted by window, shortest first
	// Bucket, when set, is enforced beside Limits: a token bucket (GCRA).
	Bucket *Bucket
	// Distinct, when set, makes Limits count the distinct values of the
	// events' related feature of that kind (event attrs) instead of
	// events: "distinct: email, limits: [20/1h]" on kind ip denies an IP that
	// tried more than 20 e-mails in an hour.
	Distinct string
	Shadow   bool   // decide and record, never deny
	Strict   bool   // the limiter checks and counts at request time (window.Store.Take)
	Message  string // human text for the deny response
	Line     int    // line of the rule in its file

	allowExact map[string]struct{}
	allowNets  []netip.Prefix
	// allowNorm holds the exact entries as the rule's kinds normalize them
	// (Set.Normalize), where that differs from the entry as written:
	// subjects are matched normalized.
	allowNorm map[string]struct{}
	// overrides give some subjects other counts (overrides.go).
	overrides []Override
}

// Allowed reports whether subject is on the rule's allowlist: equal to an
// exact entry, or an IP address inside one of its CIDR ranges. Allowlisted
// subjects are counted but never denied by this rule.
//
// An IPv6 subject counted by its prefix (Set.Subject: "2001:db8::/64") is
// allowlisted when one CIDR range holds the whole prefix. Subjects are
// matched as counted (Set.Subject): an exact entry matches in the form
// each of the rule's kinds normalizes it to, too ("Ops@Example.com" allows
// "ops@example.com" of kind email).
func (r *Rule) Allowed(subject string) bool {
	if _, ok := r.allowExact[subject]; ok {
		return true
	}
	if _, ok := r.allowNorm[subject]; ok {
		return true
	}
	if len(r.allowNets) == 0 {
		return false
	}
	addr, err := netip.ParseAddr(subject)
	if err != nil {
		sp, perr := netip.ParsePrefix(subject)
		if perr != nil {
			return false
		}
		for _, p := range r.allowNets {
			if p.Bits() <= sp.Bits() && p.Contains(sp.Addr()) {
				return true
			}
		}
		return false
	}
	addr = addr.Unmap()
	for _, p := range r.allowNets {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// MaxWindow returns the span of time the rule looks back: its longest
// window, or the time its bucket takes to refill when that is longer
// (rounded up to a whole second).
func (r *Rule) MaxWindow() time.Duration {
	var m time.Duration
	for _, l := range r.Limits {
		m = max(m, l.Window)
	}
	if r.Bucket != nil {
		m = max(m, (r.Bucket.Refill() + time.Second - 1).Truncate(time.Second))
	}
	return m
}

// Set is a validated rules file. It is immutable; reloads build a new Set.
type Set struct {
	rules []*Rule
	match map[matchKey][]*Rule
	maxW  time.Duration
	maxAK map[matchKey]time.Duration
	kinds map[string]KindOptions // the file's "kinds:" block (kinds.go)
	// plans is the file's "plans:" table, kind → subject (counted form) →
	// plan (overrides.go).
	plans map[string]map[string]string
	// source is the text parsed (nil for a derived set): what another
	// process must act under the same rules needs (Source).
	source []byte
}

type matchKey struct{ action, kind string }

// Match returns the rules for an action and a kind, in file order. The slice
// is shared: do not modify it.
func (s *Set) Match(action, kind string) []*Rule {
	if s == nil {
		return nil
	}
	return s.match[matchKey{action, kind}]
}

// MaxWindow returns the longest window of all rules (0 for an empty set).
func (s *Set) MaxWindow() time.Duration {
	if s == nil {
		return 0
	}
	return s.maxW
}

// MaxWindowFor returns the longest window of the rules for an action and a
// kind, 0 when no rule matches: the span of time the live counters of such a
// subject must cover.
func (s *Set) MaxWindowFor(action, kind string) time.Duration {
	if s == nil {
		return 0
	}
	return s.maxAK[matchKey{action, kind}]
}

// Rules returns all rules in file order. The slice is shared: do not modify it.
func (s *Set) Rules() []*Rule {
	if s == nil {
		return nil
	}
	return s.rules
}

// Source returns the text the set was parsed from, nil for a set derived
// from another. A write-back owner keeps it with its checkpoint: the next
// owner must replay the events counted since under the very same rules
// (live/writeback.go). The slice is shared: do not modify it.
func (s *Set) Source() []byte {
	if s == nil {
		return nil
	}
	return s.source
}

// Rule returns the rule named name, or nil.
func (s *Set) Rule(name string) *Rule {
	for _, r := range s.Rules() {
		if r.Name == name {
			return r
		}
	}
	return nil
}

func newSet(rules []*Rule) *Set {
	s := &Set{rules: rules, match: map[matchKey][]*Rule{}, maxAK: map[matchKey]time.Duration{}}
	for _, r := range rules {
		sort.SliceStable(r.Limits, func(i, j int) bool { return r.Limits[i].Window < r.Limits[j].Window })
		for _, k := range r.Kinds {
			mk := matchKey{r.Action, k}
			s.match[mk] = append(s.match[mk], r)
			s.maxAK[mk] = max(s.maxAK[mk], r.MaxWindow())
		}
		s.maxW = max(s.maxW, r.MaxWindow())
	}
	return s
}

// Load reads and parses the rules file at path. Errors name the file and
// line: "rules.yaml:12: rule "login": limit "5/x": unit must be s, m, h or d".
func Load(path string) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.File = path
		}
		return nil, err
	}
	return s, nil
}

// Error is a refused rules file: the line (0 when unknown) and the reason.
type Error struct {
	File   string
	Line   int
	Reason string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	} else {
		b.WriteString("rules:")
	}
	if e.Line > 0 {
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteByte(':')
	}
	b.WriteByte(' ')
	b.WriteString(e.Reason)
	return b.String()
}

func (r *Rule) addAllow(entry string, kinds []string) error {
	entry = strings.TrimSpace(entry)
	if entry == "" {
		return fmt.Errorf("allow entry is empty")
	}
	if strings.Contains(entry, "/") && slices.Contains(kinds, "ip") {
		p, err := netip.ParsePrefix(entry)
		if err != nil {
			return fmt.Errorf("allow %q: bad CIDR range: %v", entry, err)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		r.allowNets = append(r.allowNets, p.Masked())
		return nil
	}
	if r.allowExact == nil {
		r.allowExact = map[string]struct{}{}
	}
	r.allowExact[entry] = struct{}{}
	return nil
}

// normalizeAllow adds the exact entries' normalized forms (allowNorm) for
// the rule's kinds, once the file's kinds: block is known.
func (r *Rule) normalizeAllow(s *Set) {
	for entry := range r.allowExact {
		for _, k := range r.Kinds {
			if n := s.Normalize(k, entry); n != entry {
				if r.allowNorm == nil {
					r.allowNorm = map[string]struct{}{}
				}
				r.allowNorm[n] = struct{}{}
			}
		}
	}
}
