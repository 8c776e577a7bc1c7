package rules

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-dev/floodgate/event"
)

// Steps are the normalization of a kind's subjects (the kinds: block's
// normalize: option): what makes two spellings of one subject one subject.
// Steps run in a fixed order, trim, lower, ip, whatever order the file
// names them in. The zero Steps leaves subjects as given.
type Steps uint8

const (
	// StepTrim removes white space (unicode.IsSpace) at both ends.
	StepTrim Steps = 1 << iota
	// StepLower lowercases (strings.ToLower), the local part of an e-mail
	// address too.
	StepLower
	// StepIP writes an IP address or prefix in canonical form: an
	// IPv4-mapped IPv6 address as IPv4 (::ffff:203.0.113.7 ->
	// 203.0.113.7), IPv6 in lowercase with zeros compressed, without a
	// zone; a prefix masked. Anything else is left as given.
	StepIP
)

// stepNames are the steps' names in the rules file, in the order they run.
var stepNames = []struct {
	step Steps
	name string
}{{StepTrim, "trim"}, {StepLower, "lower"}, {StepIP, "ip"}}

// DefaultSteps returns the normalization of a kind the rules file does not
// set: trim and lower for email, trim and ip for ip, none for the others.
func DefaultSteps(kind string) Steps {
	switch kind {
	case "email":
		return StepTrim | StepLower
	case "ip":
		return StepTrim | StepIP
	}
	return 0
}

// String is the steps as the rules file writes them: "[trim, lower]", or
// "none".
func (st Steps) String() string {
	var names []string
	for _, n := range stepNames {
		if st&n.step != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// Apply returns subject normalized by the steps. It is idempotent, and
// returns subject itself (no allocation) when it is already normal. A
// subject that already is a digest (event.IsDigest) is left as it is; a
// normalized subject that is not a valid subject (lowercasing can lengthen
// a string past event.MaxSubjectLen) becomes its digest
// (event.CanonicalSubject), so a valid subject stays valid. A subject of
// nothing but white space is left as given: trimmed, it would be none. A
// subject that is not valid UTF-8 is not lowercased (its digest names it).
func (st Steps) Apply(subject string) string { return st.apply(subject, 0) }

// apply is Apply, its ip step cutting an IPv6 address to its /bits prefix
// too (0: not cut): Set.Subject parses an address once.
func (st Steps) apply(subject string, bits int) string {
	if st == 0 || event.IsDigest(subject) {
		return subject
	}
	out := subject
	if st&StepTrim != 0 {
		out = strings.TrimSpace(out)
	}
	if st&StepLower != 0 {
		out = lower(out)
	}
	if st&StepIP != 0 {
		out = canonicalIP(out, bits)
	}
	if out == subject || out == "" {
		return subject
	}
	return event.CanonicalSubject(out)
}

// lower lowercases s, without allocating when it has no upper case.
func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c-'A' < 26 || c >= utf8.RuneSelf {
			// Upper case, or not ASCII: the whole string decides.
			if !utf8.ValidString(s) {
				return s
			}
			return strings.ToLower(s)
		}
	}
	return s
}

// canonicalIP returns s in netip's canonical form when it is an IP address
// or prefix, else s; with bits (1 to 127), an IPv6 address or longer
// prefix becomes its /bits prefix (IPv6Prefix). It allocates only when the
// form changes.
func canonicalIP(s string, bits int) string {
	// Without a colon or a slash it is an IPv4 address (netip parses no
	// other spelling of one: no leading zeros, no short forms) or no
	// address: as given either way. Most subjects of kind ip are IPv4, and
	// the aggregator normalizes every event's.
	if strings.IndexByte(s, ':') < 0 && strings.IndexByte(s, '/') < 0 {
		return s
	}
	var p netip.Prefix
	// One parse, by the slash: a failed parse allocates its error.
	if strings.IndexByte(s, '/') < 0 {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return s
		}
		a = a.Unmap().WithZone("")
		p = netip.PrefixFrom(a, a.BitLen())
	} else {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return s
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
	}
	if bits > 0 && bits < 128 && p.Addr().Is6() && p.Bits() > bits {
		p = netip.PrefixFrom(p.Addr(), bits)
	}
	var buf [64]byte // the longest IPv6 text and "/128"
	var b []byte
	if p.Bits() == p.Addr().BitLen() && strings.IndexByte(s, '/') < 0 {
		b = p.Addr().AppendTo(buf[:0]) // an address stays one
	} else {
		b = p.Masked().AppendTo(buf[:0])
	}
	if string(b) == s {
		return s
	}
	return string(b)
}

// parseSteps reads a kind's normalize: option: "none", one step, or a
// list of steps ([] is none).
func parseSteps(kind string, v *yaml.Node) (Steps, error) {
	fail := func(at *yaml.Node, format string, args ...any) error {
		return &Error{Line: at.Line, Reason: fmt.Sprintf("kinds: %s: normalize: ", kind) + fmt.Sprintf(format, args...)}
	}
	items := []*yaml.Node{v}
	switch {
	case v.Kind == yaml.ScalarNode && v.Value == "none":
		return 0, nil
	case v.Kind == yaml.SequenceNode:
		items = v.Content
	case v.Kind != yaml.ScalarNode:
		return 0, fail(v, "want none, a step or a list of steps (trim, lower, ip), e.g. [trim, lower]")
	}
	var st Steps
	for _, it := range items {
		if it.Kind != yaml.ScalarNode {
			return 0, fail(it, "want a step name (trim, lower, ip)")
		}
		step := Steps(0)
		for _, n := range stepNames {
			if it.Value == n.name {
				step = n.step
			}
		}
		switch {
		case it.Value == "none":
			return 0, fail(it, "none stands alone (normalize: none)")
		case step == 0:
			return 0, fail(it, "unknown step %q (want trim, lower, ip, or none)", it.Value)
		case st&step != 0:
			return 0, fail(it, "step %q given twice", it.Value)
		}
		st |= step
	}
	return st, nil
}
