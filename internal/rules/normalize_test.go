package rules

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/event"
)

func TestStepsApply(t *testing.T) {
	long := strings.Repeat("Ⱥ", 128) // 256 bytes; lowercased, ⱥ is 3 bytes each
	for _, tt := range []struct {
		name  string
		steps Steps
		in    string
		want  string
	}{
		{"email", StepTrim | StepLower, "  Victim@X.Example \t", "victim@x.example"},
		{"email as is", StepTrim | StepLower, "victim@x.example", "victim@x.example"},
		{"unicode local part", StepTrim | StepLower, "ÉLODIE@Exemple.FR", "élodie@exemple.fr"},
		{"white space only", StepTrim | StepLower, "   ", "   "},
		{"inner space kept", StepTrim, " a b ", "a b"},
		{"no break space", StepTrim, "\u00a0victim@x.example\u2003", "victim@x.example"},
		{"newline then digest-free", StepTrim | StepLower, "Victim@x.example\r\n", "victim@x.example"},
		{"lowered past the limit", StepLower, long, event.CanonicalSubject(strings.ToLower(long))},
		{"digest kept", StepTrim | StepLower, event.CanonicalSubject(strings.Repeat("A", 300)), event.CanonicalSubject(strings.Repeat("A", 300))},
		{"invalid UTF-8 not lowered", StepLower, "VICTIM\xff@x", "VICTIM\xff@x"},
		{"none", 0, " Victim@x ", " Victim@x "},
		{"lower only", StepLower, " Victim@x ", " victim@x "},
		{"ipv4", StepTrim | StepIP, "203.0.113.7", "203.0.113.7"},
		{"ipv4 trimmed", StepTrim | StepIP, " 203.0.113.7\n", "203.0.113.7"},
		{"ipv4 mapped", StepTrim | StepIP, "::ffff:203.0.113.7", "203.0.113.7"},
		{"ipv4 mapped hex", StepTrim | StepIP, "::FFFF:cb00:7107", "203.0.113.7"},
		{"ipv6 upper", StepIP, "2001:DB8:0:0::1", "2001:db8::1"},
		{"ipv6 zone", StepIP, "fe80::1%eth0", "fe80::1"},
		{"ipv6 canonical", StepIP, "2001:db8::1", "2001:db8::1"},
		{"ipv6 prefix unmasked", StepIP, "2001:DB8::1/64", "2001:db8::/64"},
		{"ipv4 prefix unmasked", StepIP, "10.1.2.3/8", "10.0.0.0/8"},
		{"ipv4 mapped prefix", StepIP, "::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"ipv4 leading zero: no address", StepIP, "010.0.0.1", "010.0.0.1"},
		{"not an address", StepIP, "Alice:Smith", "Alice:Smith"},
		{"ip does not lower", StepIP, "Host-A", "Host-A"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.steps.Apply(tt.in)
			if got != tt.want {
				t.Fatalf("%s.Apply(%q) = %q, want %q", tt.steps, tt.in, got, tt.want)
			}
			if again := tt.steps.Apply(got); again != got {
				t.Errorf("not idempotent: %q, then %q", got, again)
			}
			if event.CanonicalSubject(tt.in) == tt.in && event.CanonicalSubject(got) != got {
				t.Errorf("a valid subject became the invalid %q", got)
			}
		})
	}
}

// The aggregator normalizes every event's subject: one already normal
// costs no allocation.
func TestSubjectAllocatesNothingWhenNormal(t *testing.T) {
	var set *Set // the built-in kind defaults
	for _, c := range []struct{ kind, subject string }{
		{"email", "victim@x.example"},
		{"ip", "203.0.113.7"},
		{"ip", "2001:db8:1:2::/64"},
		{"user", "Alice"},
		{"email", "élodie@exemple.fr"},
	} {
		if got := set.Subject(c.kind, c.subject); got != c.subject {
			t.Fatalf("Subject(%s, %q) = %q: not normal", c.kind, c.subject, got)
		}
		if n := testing.AllocsPerRun(100, func() { _ = set.Subject(c.kind, c.subject) }); n != 0 {
			t.Errorf("Subject(%s, %q): %v allocations, want 0", c.kind, c.subject, n)
		}
	}
}

func BenchmarkSubject(b *testing.B) {
	var set *Set
	for _, c := range []struct{ name, kind, subject string }{
		{"email-normal", "email", "victim.name@example.com"},
		{"email-upper", "email", " Victim.Name@Example.com"},
		{"ipv4", "ip", "203.0.113.7"},
		{"ipv6-prefix", "ip", "2001:db8:1:2::/64"},
		{"ipv6-address", "ip", "2001:db8:1:2:3:4:5:6"},
		{"user", "user", "u-12345"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = set.Subject(c.kind, c.subject)
			}
		})
	}
}

func TestKindsNormalizeOption(t *testing.T) {
	rule := "rules:\n  - name: a\n    action: x\n    kinds: [ip, email, user]\n    limits: [1/s]\n"
	def, err := Parse([]byte(rule))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ kind, in, want string }{
		{"email", " Victim@X.example ", "victim@x.example"},
		{"ip", "::ffff:203.0.113.7", "203.0.113.7"},
		{"ip", " 2001:DB8:1:2::9 ", "2001:db8:1:2::/64"}, // normalized, then its /64
		{"user", " Alice ", " Alice "},
	} {
		if got := def.Subject(c.kind, c.in); got != c.want {
			t.Errorf("default %s: Subject(%q) = %q, want %q", c.kind, c.in, got, c.want)
		}
	}
	if got := def.Normalize("ip", "2001:DB8:1:2::9"); got != "2001:db8:1:2::9" {
		t.Errorf("Normalize keeps an IPv6 address whole: %q", got)
	}
	set, err := Parse([]byte(rule + `kinds:
  email: {normalize: none}
  ip: {normalize: [ip], ipv6_prefix: 128}
  user: {normalize: [lower, trim]}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ kind, in, want string }{
		{"email", " Victim@X.example ", " Victim@X.example "},
		{"ip", "::ffff:203.0.113.7", "203.0.113.7"},
		{"ip", " 203.0.113.7", " 203.0.113.7"},
		{"ip", "2001:DB8:1:2::9", "2001:db8:1:2::9"},
		{"user", " Alice ", "alice"},
	} {
		if got := set.Subject(c.kind, c.in); got != c.want {
			t.Errorf("%s: Subject(%q) = %q, want %q", c.kind, c.in, got, c.want)
		}
	}
	if got, want := set.Kind("user").Normalize.String(), "[trim, lower]"; got != want {
		t.Errorf("user steps %s, want %s", got, want)
	}
	if got := set.Kind("email").Normalize.String(); got != "none" {
		t.Errorf("email steps %s, want none", got)
	}
	one, err := Parse([]byte(rule + "kinds:\n  user: {normalize: lower}\n  email: {normalize: []}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if one.Kind("user").Normalize != StepLower || one.Kind("email").Normalize != 0 {
		t.Errorf("a single step and an empty list: %s, %s", one.Kind("user").Normalize, one.Kind("email").Normalize)
	}
	for _, bad := range []struct{ yaml, err string }{
		{"kinds:\n  email: {normalize: upper}\n", `unknown step "upper"`},
		{"kinds:\n  email: {normalize: [trim, casefold]}\n", `unknown step "casefold"`},
		{"kinds:\n  email: {normalize: [trim, trim]}\n", "given twice"},
		{"kinds:\n  email: {normalize: [none, trim]}\n", "none stands alone"},
		{"kinds:\n  email: {normalize: {trim: true}}\n", "want none, a step or a list"},
		{"kinds:\n  email: {normalize: [[trim]]}\n", "want a step name"},
		{"kinds:\n  email: {normalise: [trim]}\n", `unknown key "normalise" (want normalize,`},
	} {
		_, err := Parse([]byte(rule + bad.yaml))
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(e.Reason, bad.err) || e.Line == 0 {
			t.Errorf("%q: err %v, want a line and %q", bad.yaml, err, bad.err)
		}
	}
}

// An allowlist entry matches the subject as its kinds normalize it.
func TestAllowedNormalized(t *testing.T) {
	set, err := Parse([]byte(`rules:
  - name: a
    action: x
    kinds: [email, ip, user]
    limits: [1/s]
    allow: [Ops@Example.com, "::ffff:192.0.2.1"]
kinds:
  user: {normalize: none}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := set.Rule("a")
	for _, c := range []struct {
		kind, subject string
		want          bool
	}{
		{"email", "OPS@example.com ", true},
		{"email", "ops@example.org", false},
		{"ip", "192.0.2.1", true},
		{"ip", "::ffff:192.0.2.1", true},
		{"user", "Ops@Example.com", true},
	} {
		if got := r.Allowed(set.Subject(c.kind, c.subject)); got != c.want {
			t.Errorf("%s %q: allowed %v, want %v", c.kind, c.subject, got, c.want)
		}
	}
	if n := r.AllowSize(); n != 2 {
		t.Errorf("AllowSize %d, want the 2 entries written", n)
	}
}

// A derived set (a backtest from history) counts subjects as its file says.
func TestDeriveKeepsKinds(t *testing.T) {
	set, err := Parse([]byte("rules:\n  - name: a\n    action: x\n    kinds: [email]\n    limits: [1/s]\nkinds:\n  email: {normalize: none}\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := set.Derive(func(r *Rule) *Rule { return r })
	if got := d.Subject("email", "A@x"); got != "A@x" {
		t.Errorf("derived set: %q, want the file's normalize: none", got)
	}
}

// Subject cuts the prefix as the ip step writes the address: the same as
// normalizing, then IPv6Prefix.
func TestSubjectIsNormalizeThenPrefix(t *testing.T) {
	var set *Set
	for _, in := range []string{
		"2001:db8:1:2:3:4:5:6", "2001:DB8:0001:0002::ffff", "fe80::1%eth0", "2001:db8:1:2::/64", "2001:db8:1:2:3::/80",
		"2001:db8::/48", "2001:db8::1/128", "203.0.113.7", "::ffff:203.0.113.7", "::ffff:10.0.0.0/104", "10.1.0.0/16",
		" 2001:db8::1 ", "alice@example.com", "a:b", "::", "::/0",
	} {
		want := IPv6Prefix(set.Normalize("ip", in), DefaultIPv6Prefix)
		if got := set.Subject("ip", in); got != want {
			t.Errorf("Subject(ip, %q) = %q, want %q", in, got, want)
		}
	}
}
