package rules

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

func TestIPv6Prefix(t *testing.T) {
	for _, tt := range []struct {
		in   string
		bits int
		want string
	}{
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"},
		{"2001:DB8:0001:0002::ffff", 64, "2001:db8:1:2::/64"},
		{"fe80::1%eth0", 64, "fe80::/64"},
		{"2001:db8:1:2::/64", 64, "2001:db8:1:2::/64"}, // idempotent
		{"2001:db8:1:2:3::/80", 64, "2001:db8:1:2::/64"},
		{"2001:db8::/48", 64, "2001:db8::/48"}, // already wider
		{"2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48"},
		{"203.0.113.7", 64, "203.0.113.7"},
		{"::ffff:203.0.113.7", 64, "::ffff:203.0.113.7"},
		{"alice@example.com", 64, "alice@example.com"},
		{"10.0.0.0/8", 64, "10.0.0.0/8"},
	} {
		if got := IPv6Prefix(tt.in, tt.bits); got != tt.want {
			t.Errorf("IPv6Prefix(%q, %d) = %q, want %q", tt.in, tt.bits, got, tt.want)
		}
	}
}

func TestKindsOption(t *testing.T) {
	rule := "rules:\n  - name: a\n    action: x\n    kinds: [ip, client_ip]\n    limits: [1/s]\n"
	def, err := Parse([]byte(rule))
	if err != nil {
		t.Fatal(err)
	}
	if got := def.Subject("ip", "2001:db8:1:2::9"); got != "2001:db8:1:2::/64" {
		t.Errorf("default ip: %q, want the /64", got)
	}
	if got := def.Subject("client_ip", "2001:db8:1:2::9"); got != "2001:db8:1:2::9" {
		t.Errorf("another kind without options: %q, want it as given", got)
	}
	if got := (*Set)(nil).Subject("ip", "2001:db8::9"); got != "2001:db8::/64" {
		t.Errorf("nil set: %q", got)
	}
	set, err := Parse([]byte(rule + "kinds:\n  ip: {ipv6_prefix: 128}\n  client_ip: {ipv6_prefix: 56}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Subject("ip", "2001:db8:1:2::9"); got != "2001:db8:1:2::9" {
		t.Errorf("ip at /128: %q, want each address", got)
	}
	if got := set.Subject("client_ip", "2001:db8:1:2::9"); got != "2001:db8:1::/56" {
		t.Errorf("client_ip at /56: %q", got)
	}
	for _, bad := range []struct{ yaml, err string }{
		{"kinds:\n  ip: {ipv6_prefix: 0}\n", "from 1 to 128"},
		{"kinds:\n  ip: {ipv6_prefix: 129}\n", "from 1 to 128"},
		{"kinds:\n  ip: {ipv6_prefix: x}\n", "from 1 to 128"},
		{"kinds:\n  ip: {ipv4_prefix: 24}\n", `unknown key "ipv4_prefix"`},
		{"kinds:\n  IP: {ipv6_prefix: 64}\n", "only [a-z0-9_.-]"},
		{"kinds: [ip]\n", "want a mapping"},
	} {
		_, err := Parse([]byte(rule + bad.yaml))
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(e.Reason, bad.err) || e.Line == 0 {
			t.Errorf("%q: err %v, want a line and %q", bad.yaml, err, bad.err)
		}
	}
}

// An IPv6 prefix is allowlisted when one range holds all of it.
func TestAllowedPrefix(t *testing.T) {
	set, err := Parse([]byte("rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    limits: [1/s]\n    allow: [2001:db8:1::/48, 2001:db8:2:3::/96]\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := set.Rule("a")
	for sub, want := range map[string]bool{
		set.Subject("ip", "2001:db8:1:5::9"): true,  // /64 inside the /48
		set.Subject("ip", "2001:db8:2:3::9"): false, // /64 wider than the /96
		set.Subject("ip", "2001:db8:9::9"):   false,
	} {
		if got := r.Allowed(sub); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", sub, got, want)
		}
	}
}

// The history options of the kinds: block, with the defaults of personal
// kinds, and their errors.
func TestKindsHistoryOptions(t *testing.T) {
	rule := "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    limits: [1/s]\n"
	def, err := Parse([]byte(rule))
	if err != nil {
		t.Fatal(err)
	}
	if got := def.HistoryHorizons(); len(got) != 3 || got["ip"] != DefaultHorizon || got["email"] != DefaultHorizon || got["user"] != DefaultHorizon {
		t.Errorf("default horizons %v, want ip, email, user at 400d", got)
	}
	if got := def.HistoryStorages(); len(got) != 0 {
		t.Errorf("default storages %v, want every kind raw", got)
	}
	if got := def.Kind("link"); got.Personal || got.Horizon != 0 || got.History != HistoryRaw {
		t.Errorf("link: %+v, want raw, not personal", got)
	}
	set, err := Parse([]byte(rule + `kinds:
  ip: {history: hash}
  email: {history: hash, horizon: 90d}
  user: {horizon: forever}
  link: {history: drop}
  device: {personal: true}
  session: {horizon: 2w}
  account: {personal: false}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Kind("ip"); got.IPv6Prefix != DefaultIPv6Prefix || got.History != HistoryHash || got.Horizon != DefaultHorizon {
		t.Errorf("ip: %+v, want its /64 default kept beside history: hash", got)
	}
	wantH := map[string]time.Duration{"ip": DefaultHorizon, "email": 90 * 24 * time.Hour, "device": DefaultHorizon, "session": 14 * 24 * time.Hour}
	if got := set.HistoryHorizons(); !maps.Equal(got, wantH) {
		t.Errorf("horizons %v, want %v", got, wantH)
	}
	wantS := map[string]HistoryStorage{"ip": HistoryHash, "email": HistoryHash, "link": HistoryDrop}
	if got := set.HistoryStorages(); !maps.Equal(got, wantS) {
		t.Errorf("storages %v, want %v", got, wantS)
	}
	for _, bad := range []struct{ yaml, err string }{
		{"kinds:\n  ip: {history: encrypt}\n", "raw, hash or drop"},
		{"kinds:\n  ip: {history: [hash]}\n", "raw, hash or drop"},
		{"kinds:\n  ip: {horizon: 12h}\n", "days or weeks"},
		{"kinds:\n  ip: {horizon: 0d}\n", "days or weeks"},
		{"kinds:\n  ip: {horizon: 99999999d}\n", "days or weeks"},
		{"kinds:\n  ip: {personal: maybe}\n", "true or false"},
	} {
		_, err := Parse([]byte(rule + bad.yaml))
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(e.Reason, bad.err) || e.Line == 0 {
			t.Errorf("%q: err %v, want a line and %q", bad.yaml, err, bad.err)
		}
	}
}
