package rules

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-dev/floodgate/internal/timespan"
)

// DefaultIPv6Prefix is the prefix length an IPv6 subject of kind "ip" is
// counted by unless the rules file says otherwise: one host usually holds
// a whole /64 (SLAAC, privacy addresses), so counting addresses would give
// each host 2^64 fresh subjects. Cloudflare and nginx users expect /64.
const DefaultIPv6Prefix = 64

// DefaultHorizon is how long history keeps the rows of a personal kind
// (PersonalKinds, or personal: true) unless the kind says otherwise: about
// a year and a month, so that a year ago today can still be compared.
const DefaultHorizon = 400 * 24 * time.Hour

// PersonalKinds are the kinds whose subjects name people (or their
// devices) unless the rules file says personal: false: history forgets
// them after a horizon (DefaultHorizon).
var PersonalKinds = []string{"email", "ip", "user"}

// HistoryStorage is how history stores the subjects of a kind.
type HistoryStorage string

const (
	// HistoryRaw stores subjects as given (the default).
	HistoryRaw HistoryStorage = "raw"
	// HistoryHash stores a keyed hash of each subject (--history-key-file):
	// counts and rankings stay, the subject can be looked up by whoever
	// holds the key, and read by nobody.
	HistoryHash HistoryStorage = "hash"
	// HistoryDrop keeps the kind out of history entirely; live limiting is
	// unaffected.
	HistoryDrop HistoryStorage = "drop"
)

// KindOptions are the per-kind settings of a rules file's "kinds:" block.
type KindOptions struct {
	// IPv6Prefix counts an IPv6 subject by its prefix of this many bits
	// (1 to 128; 128 counts addresses). 0: subjects are taken as given.
	IPv6Prefix int
	// History is how history stores the kind's subjects. Default raw.
	History HistoryStorage
	// Personal marks a kind whose subjects name people: history deletes its
	// rows past Horizon. Default: true for PersonalKinds.
	Personal bool
	// Horizon is how long history keeps a personal kind's rows; 0 means
	// forever. Default DefaultHorizon. Ignored unless Personal.
	Horizon time.Duration
	// Normalize makes the spellings of one subject one subject (trim,
	// lower, ip), before IPv6Prefix. Default DefaultSteps.
	Normalize Steps
}

// defaultKind is the options of a kind the rules file does not name.
func defaultKind(kind string) KindOptions {
	o := KindOptions{History: HistoryRaw, Normalize: DefaultSteps(kind)}
	if kind == "ip" {
		o.IPv6Prefix = DefaultIPv6Prefix
	}
	if slices.Contains(PersonalKinds, kind) {
		o.Personal, o.Horizon = true, DefaultHorizon
	}
	return o
}

// Kind returns the options of a kind: those of the rules file, the
// defaults (defaultKind) for what it leaves out.
func (s *Set) Kind(kind string) KindOptions {
	if s != nil {
		if o, ok := s.kinds[kind]; ok {
			return o
		}
	}
	return defaultKind(kind)
}

// Kinds returns the kinds the rules file's "kinds:" block names and the
// PersonalKinds, sorted: every kind whose options are not the plain
// defaults.
func (s *Set) Kinds() []string {
	var out []string
	if s != nil {
		out = slices.Collect(maps.Keys(s.kinds))
	}
	for _, k := range PersonalKinds {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// HistoryHorizons returns, per kind, how long history keeps its rows: the
// personal kinds with a finite horizon. Kinds not in it keep the ladder's
// retention.
func (s *Set) HistoryHorizons() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, k := range s.Kinds() {
		if o := s.Kind(k); o.Personal && o.Horizon > 0 {
			out[k] = o.Horizon
		}
	}
	return out
}

// HistoryStorages returns the kinds whose history storage is not raw.
func (s *Set) HistoryStorages() map[string]HistoryStorage {
	out := map[string]HistoryStorage{}
	for _, k := range s.Kinds() {
		if o := s.Kind(k); o.History != HistoryRaw && o.History != "" {
			out[k] = o.History
		}
	}
	return out
}

// Subject returns the subject a value of a kind is counted and checked as:
// normalized (Normalize), then, for a kind with an IPv6 prefix, an IPv6
// address (or a longer prefix) becomes its prefix in canonical form,
// "2001:db8:1:2::/64"; IPv4 addresses are not cut. The limiter's lookups
// and takes, the aggregator's counting (live.Applier.Apply), the operators'
// commands and the backtest all call it, so all name a subject alike; it
// is idempotent, and does not allocate for a subject already in its form
// (IPv6 subjects of a prefixed kind aside).
func (s *Set) Subject(kind, subject string) string {
	steps, bits := s.counting(kind)
	if steps&StepIP != 0 {
		// The ip step cuts the prefix as it writes the address.
		return steps.apply(subject, bits)
	}
	subject = steps.Apply(subject)
	// No colon, no IPv6: IPv4 addresses (most subjects of kind ip) skip
	// the parse, which runs for every event the aggregator counts.
	if bits <= 0 || bits >= 128 || strings.IndexByte(subject, ':') < 0 {
		return subject
	}
	return IPv6Prefix(subject, bits)
}

// Normalize returns subject normalized as its kind says (KindOptions.
// Normalize; Steps.Apply): the form history stores and looks it up in,
// which keeps IPv6 addresses whole. Subject is Normalize and the prefix.
func (s *Set) Normalize(kind, subject string) string {
	steps, _ := s.counting(kind)
	return steps.Apply(subject)
}

// counting returns what of a kind's options Subject needs, without
// building the whole KindOptions: it runs for every event counted.
func (s *Set) counting(kind string) (Steps, int) {
	if s != nil {
		if o, ok := s.kinds[kind]; ok {
			return o.Normalize, o.IPv6Prefix
		}
	}
	if kind == "ip" {
		return DefaultSteps(kind), DefaultIPv6Prefix
	}
	return DefaultSteps(kind), 0
}

// IPv6Prefix returns the /bits prefix of an IPv6 address or prefix
// ("2001:db8::1" -> "2001:db8::/64" for 64), or subject unchanged when it
// is neither, is IPv4 (IPv4-mapped too), or is a prefix of bits or fewer.
func IPv6Prefix(subject string, bits int) string {
	// One parse, by the slash: a failed parse allocates its error.
	if strings.IndexByte(subject, '/') < 0 {
		addr, err := netip.ParseAddr(subject)
		if err != nil || !addr.Is6() || addr.Is4In6() {
			return subject
		}
		p, err := addr.WithZone("").Prefix(bits)
		if err != nil {
			return subject
		}
		return p.String()
	}
	if p, err := netip.ParsePrefix(subject); err == nil && p.Addr().Is6() && !p.Addr().Is4In6() && p.Bits() > bits {
		q, err := p.Addr().Prefix(bits)
		if err == nil {
			return q.String()
		}
	}
	return subject
}

// parseKinds reads the "kinds:" block: {<kind>: {normalize: none|<step>|
// [<step>...], ipv6_prefix: <bits>, history: raw|hash|drop, personal:
// <bool>, horizon: <n>d|forever}}. What a
// kind leaves out keeps its default (defaultKind).
func parseKinds(v *yaml.Node) (map[string]KindOptions, error) {
	out := map[string]KindOptions{}
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return out, nil
	}
	if v.Kind != yaml.MappingNode {
		return nil, &Error{Line: v.Line, Reason: "kinds: want a mapping of kind to options, e.g. {ip: {ipv6_prefix: 64}}"}
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, o := v.Content[i], v.Content[i+1]
		if !nameRE.MatchString(k.Value) {
			return nil, &Error{Line: k.Line, Reason: fmt.Sprintf("kinds: kind %q: only [a-z0-9_.-], 1 to 64 bytes", k.Value)}
		}
		if _, dup := out[k.Value]; dup {
			return nil, &Error{Line: k.Line, Reason: fmt.Sprintf("kinds: kind %q given twice", k.Value)}
		}
		if o.Kind != yaml.MappingNode {
			return nil, &Error{Line: o.Line, Reason: fmt.Sprintf("kinds: %s: want a mapping, e.g. {ipv6_prefix: 64}", k.Value)}
		}
		opts := defaultKind(k.Value)
		horizonSet := false
		for j := 0; j+1 < len(o.Content); j += 2 {
			ok, ov := o.Content[j], o.Content[j+1]
			switch ok.Value {
			case "history":
				switch st := HistoryStorage(ov.Value); st {
				case HistoryRaw, HistoryHash, HistoryDrop:
					if ov.Kind == yaml.ScalarNode {
						opts.History = st
						continue
					}
				}
				return nil, &Error{Line: ov.Line, Reason: fmt.Sprintf("kinds: %s: history: want raw, hash or drop", k.Value)}
			case "personal":
				if ov.Kind != yaml.ScalarNode || ov.Decode(&opts.Personal) != nil {
					return nil, &Error{Line: ov.Line, Reason: fmt.Sprintf("kinds: %s: personal: want true or false", k.Value)}
				}
			case "horizon":
				d, err := parseHorizon(ov.Value)
				if err != nil || ov.Kind != yaml.ScalarNode {
					return nil, &Error{Line: ov.Line, Reason: fmt.Sprintf("kinds: %s: horizon: want a whole number of days or weeks (90d, 52w) or forever", k.Value)}
				}
				opts.Horizon, horizonSet = d, true
			case "normalize":
				st, err := parseSteps(k.Value, ov)
				if err != nil {
					return nil, err
				}
				opts.Normalize = st
			case "ipv6_prefix":
				if err := ov.Decode(&opts.IPv6Prefix); err != nil || ov.Kind != yaml.ScalarNode || opts.IPv6Prefix < 1 || opts.IPv6Prefix > 128 {
					return nil, &Error{Line: ov.Line, Reason: fmt.Sprintf("kinds: %s: ipv6_prefix: want a prefix length from 1 to 128 (128 counts each address)", k.Value)}
				}
			default:
				return nil, &Error{Line: ok.Line, Reason: fmt.Sprintf("kinds: %s: unknown key %q (want normalize, ipv6_prefix, history, personal, horizon)", k.Value, ok.Value)}
			}
		}
		switch {
		case horizonSet && opts.Horizon > 0:
			// A horizon makes the kind personal: it is why one is given.
			opts.Personal = true
		case horizonSet:
		case opts.Personal && opts.Horizon == 0:
			opts.Horizon = DefaultHorizon
		}
		if !opts.Personal {
			opts.Horizon = 0
		}
		out[k.Value] = opts
	}
	return out, nil
}

// maxHorizon bounds a horizon: longer is forever in all but name.
const maxHorizon = 100 * 365 * 24 * time.Hour

// parseHorizon reads a history horizon: "forever" (0), or a duration of
// the one grammar (timespan) in whole days, from 1d to maxHorizon: the
// roller forgets by the day.
func parseHorizon(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "forever" {
		return 0, nil
	}
	d, err := timespan.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("horizon: %w (or forever)", err)
	}
	const day = 24 * time.Hour
	if d < day || d%day != 0 || d > maxHorizon {
		return 0, fmt.Errorf("horizon %q: want whole days from 1d to %s (e.g. 90d, 52w), or forever", s, timespan.Format(maxHorizon))
	}
	return d, nil
}
