package rules

import (
	"fmt"
	"net/netip"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DefaultIPv6Prefix is the prefix length an IPv6 subject of kind "ip" is
// counted by unless the rules file says otherwise: one host usually holds
// a whole /64 (SLAAC, privacy addresses), so counting addresses would give
// each host 2^64 fresh subjects. Cloudflare and nginx users expect /64.
const DefaultIPv6Prefix = 64

// KindOptions are the per-kind settings of a rules file's "kinds:" block.
type KindOptions struct {
	// IPv6Prefix counts an IPv6 subject by its prefix of this many bits
	// (1 to 128; 128 counts addresses). 0: subjects are taken as given.
	IPv6Prefix int
}

// Kind returns the options of a kind: those of the rules file, else for
// kind "ip" an IPv6 prefix of DefaultIPv6Prefix.
func (s *Set) Kind(kind string) KindOptions {
	if s != nil {
		if o, ok := s.kinds[kind]; ok {
			return o
		}
	}
	if kind == "ip" {
		return KindOptions{IPv6Prefix: DefaultIPv6Prefix}
	}
	return KindOptions{}
}

// Subject returns the subject a value of a kind is counted and checked as:
// for a kind with an IPv6 prefix, an IPv6 address (or a longer prefix) becomes its
// prefix in canonical form, "2001:db8:1:2::/64"; everything else, IPv4
// addresses included, is returned as given. The limiter's lookups and
// the aggregator's counting (window.Store.Apply) both call it, so both name
// a subject alike; it is idempotent.
func (s *Set) Subject(kind, subject string) string {
	bits := s.Kind(kind).IPv6Prefix
	// No colon, no IPv6: IPv4 addresses (most subjects of kind ip) skip
	// the parse, which runs for every event the aggregator counts.
	if bits <= 0 || bits >= 128 || strings.IndexByte(subject, ':') < 0 {
		return subject
	}
	return IPv6Prefix(subject, bits)
}

// IPv6Prefix returns the /bits prefix of an IPv6 address or prefix
// ("2001:db8::1" -> "2001:db8::/64" for 64), or subject unchanged when it
// is neither, is IPv4 (IPv4-mapped too), or is a prefix of bits or fewer.
func IPv6Prefix(subject string, bits int) string {
	if addr, err := netip.ParseAddr(subject); err == nil {
		if !addr.Is6() || addr.Is4In6() {
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

// parseKinds reads the "kinds:" block: {<kind>: {ipv6_prefix: <bits>}}.
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
		var opts KindOptions
		for j := 0; j+1 < len(o.Content); j += 2 {
			ok, ov := o.Content[j], o.Content[j+1]
			switch ok.Value {
			case "ipv6_prefix":
				if err := ov.Decode(&opts.IPv6Prefix); err != nil || ov.Kind != yaml.ScalarNode || opts.IPv6Prefix < 1 || opts.IPv6Prefix > 128 {
					return nil, &Error{Line: ov.Line, Reason: fmt.Sprintf("kinds: %s: ipv6_prefix: want a prefix length from 1 to 128 (128 counts each address)", k.Value)}
				}
			default:
				return nil, &Error{Line: ok.Line, Reason: fmt.Sprintf("kinds: %s: unknown key %q (want ipv6_prefix)", k.Value, ok.Value)}
			}
		}
		out[k.Value] = opts
	}
	return out, nil
}
