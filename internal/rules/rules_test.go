package rules

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in   string
		want Limit
		err  string
	}{
		{in: "2/s", want: Limit{2, time.Second}},
		{in: "5/m", want: Limit{5, time.Minute}},
		{in: "5/1m", want: Limit{5, time.Minute}},
		{in: "10/h", want: Limit{10, time.Hour}},
		{in: "100/d", want: Limit{100, 24 * time.Hour}},
		{in: "10/30s", want: Limit{10, 30 * time.Second}},
		{in: "50/5m", want: Limit{50, 5 * time.Minute}},
		{in: " 7 / 7d ", want: Limit{7, 7 * 24 * time.Hour}},
		{in: "5", err: "want <count>/<window>"},
		{in: "0/m", err: "count must be"},
		{in: "x/m", err: "count must be"},
		{in: "5/", err: "window is empty"},
		{in: "5/w", want: Limit{5, 7 * 24 * time.Hour}},
		{in: "5/1w", want: Limit{5, 7 * 24 * time.Hour}},
		{in: "9/1h30m", want: Limit{9, 90 * time.Minute}},
		{in: "9/1.5m", want: Limit{9, 90 * time.Second}},
		{in: "5/1mo", err: `window "1mo": unknown unit "mo"; want whole seconds from 1s to 7d`},
		{in: "5/x", err: "want a number"},
		{in: "5/0s", err: "shorter than 1s"},
		{in: "5/-1m", err: "shorter than 1s"},
		{in: "5/500ms", err: "shorter than 1s"},
		{in: "5/1500ms", err: "not a whole number of seconds"},
		{in: "5/8d", err: "longer than the maximum 7d"},
		{in: "5/2w", err: "longer than the maximum 7d"},
		{in: "5/99999999999999999999d", err: "over 292 years"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseLimit(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseLimit(%q) err = %v, want containing %q", tt.in, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseLimit(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestLimitString(t *testing.T) {
	for in, want := range map[string]string{"2/s": "2/1s", "5/60s": "5/1m", "9/90s": "9/90s", "1/24h": "1/1d", "3/120m": "3/2h"} {
		l, err := ParseLimit(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.String(); got != want {
			t.Errorf("%s.String() = %q, want %q", in, got, want)
		}
	}
}

func TestParseExample(t *testing.T) {
	s, err := Load("../../examples/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(s.Rules()); got != 6 {
		t.Fatalf("rules = %d, want 6", got)
	}
	if o := s.Kind("ip"); o.IPv6Prefix != 64 {
		t.Errorf("ip kind = %+v, want the /64 the file sets", o)
	}
	if r := s.Rule("credential-stuffing"); r.Distinct != "email" || r.Limits[0] != (Limit{20, time.Hour}) {
		t.Errorf("credential-stuffing = %+v", r)
	}
	if r := s.Rule("api"); r.Bucket == nil || r.Bucket.Burst != 50 || r.Bucket.Interval() != 100*time.Millisecond {
		t.Errorf("api = %+v", r)
	}
	login := s.Match("login_failed", "email")
	if len(login) != 1 || login[0].Name != "login-failed" {
		t.Fatalf("Match(login_failed, email) = %v", login)
	}
	want := []Limit{{2, time.Second}, {5, time.Minute}, {10, time.Hour}, {100, 24 * time.Hour}}
	for i, l := range login[0].Limits {
		if l != want[i] {
			t.Errorf("limit %d = %v, want %v", i, l, want[i])
		}
	}
	if s.MaxWindow() != 24*time.Hour {
		t.Errorf("MaxWindow = %v", s.MaxWindow())
	}
	if got := s.MaxWindowFor("visit", "ip"); got != time.Hour {
		t.Errorf("MaxWindowFor(visit, ip) = %v, want 1h", got)
	}
	if got := s.MaxWindowFor("visit", "email"); got != 0 {
		t.Errorf("MaxWindowFor(visit, email) = %v, want 0", got)
	}
	if !s.Rule("link-visit").Shadow || !s.Rule("password-reset").Strict {
		t.Error("shadow/strict flags not parsed")
	}
	if s.Match("login_failed", "user") != nil {
		t.Error("unexpected match for kind user")
	}
}

func TestAllowed(t *testing.T) {
	s, err := Parse([]byte(`
rules:
  - name: r
    action: login_failed
    kinds: [ip, email]
    limits: [1/s]
    allow: [10.0.0.0/8, "2001:db8::/32", 192.0.2.7, ops@example.com]
`))
	if err != nil {
		t.Fatal(err)
	}
	r := s.Rules()[0]
	for subject, want := range map[string]bool{
		"10.1.2.3":           true,
		"::ffff:10.1.2.3":    true,
		"11.1.2.3":           false,
		"2001:db8::1":        true,
		"2001:db9::1":        false,
		"192.0.2.7":          true,
		"192.0.2.8":          false,
		"ops@example.com":    true,
		"ops2@example.com":   false,
		"10.0.0.0/8-ish-not": false,
	} {
		if got := r.Allowed(subject); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", subject, got, want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		line int
		err  string
	}{
		{"empty", ``, 0, "file is empty"},
		{"not mapping", "- a\n- b\n", 1, "want a mapping"},
		{"unknown top", "rule:\n  - name: x\n", 1, `unknown top-level key "rule"`},
		{"syntax", "rules:\n  - name: [x\n", -1, "YAML:"}, // yaml.v3 reports the context line
		{"bad limit", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    limits: [2/s, 5/1mo]\n", 5, `rule "a": limit "5/1mo": window "1mo": unknown unit "mo"`},
		{"dup window", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    limits:\n      - 2/60s\n      - 5/1m\n", 7, "two limits with window 1m"},
		{"unknown key", "rules:\n  - name: a\n    action: x\n    kind: ip\n    limits: 1/s\n    shadwo: true\n", 6, `unknown key "shadwo"`},
		{"no name", "rules:\n  - action: x\n    kinds: [ip]\n    limits: [1/s]\n", 2, "name is required"},
		{"no limits", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n", 2, `rule "a": limits or bucket is required`},
		{"bucket not a mapping", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    bucket: 10/s\n", 5, "bucket: want a mapping"},
		{"bucket bad rate", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    bucket: {rate: 10/1mo, burst: 5}\n", 5, "bucket: rate: limit \"10/1mo\""},
		{"bucket no burst", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    bucket: {rate: 10/s}\n", 5, "burst must be a whole number >= 1"},
		{"bucket unknown key", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    bucket: {rate: 10/s, burst: 5, size: 3}\n", 5, `unknown key "size"`},
		{"bucket too slow", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    bucket: {rate: 1/7d, burst: 2}\n", 2, "refills in"},
		{"distinct without limits", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    distinct: email\n    bucket: {rate: 1/s, burst: 2}\n", 2, "distinct counts with limits"},
		{"distinct and bucket", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    distinct: email\n    limits: [5/m]\n    bucket: {rate: 1/s, burst: 2}\n", 2, "distinct and bucket in one rule"},
		{"distinct too many", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    distinct: email\n    limits: [10000/h]\n", 2, "at most 10000 distinct values"},
		{"distinct bad kind", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    distinct: E-mail\n    limits: [5/m]\n", 5, "distinct \"E-mail\""},
		{"distinct deny", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    distinct: deny\n    limits: [5/m]\n", 5, "distinct \"deny\": reserved"},
		{"distinct shadow", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    distinct: shadow\n    limits: [5/m]\n", 5, "distinct \"shadow\": reserved"},
		{"distinct g", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    distinct: g\n    limits: [5/m]\n", 5, "distinct \"g\": reserved"},
		{"bad action", "rules:\n  - name: a\n    action: Login Failed\n    kinds: [ip]\n    limits: [1/s]\n", 3, "only [a-z0-9_.-]"},
		{"bad shadow", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    limits: [1/s]\n    shadow: maybe\n", 6, "shadow: want true or false"},
		{"bad cidr", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    limits: [1/s]\n    allow:\n      - 10.0.0.0/33\n", 7, "bad CIDR"},
		{"dup name", "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    limits: [1/s]\n  - name: a\n    action: y\n    kinds: [ip]\n    limits: [1/s]\n", 6, "name already used on line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if (tt.line >= 0 && e.Line != tt.line) || (tt.line < 0 && e.Line == 0) || !strings.Contains(e.Reason, tt.err) {
				t.Fatalf("err = line %d %q, want line %d containing %q", e.Line, e.Reason, tt.line, tt.err)
			}
		})
	}
}

func TestParseBucketAndDistinct(t *testing.T) {
	set, err := Parse([]byte(`
rules:
  - name: api
    action: api
    kinds: [user]
    bucket: {rate: 10/s, burst: 50}
    limits: [1000/1h]
  - name: stuffing
    action: login_failed
    kinds: [ip]
    distinct: email
    limits: [20/1h]
  - name: slow
    action: slow
    kinds: [ip]
    bucket: {rate: 3/1m, burst: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	api := set.Rule("api")
	if api.Bucket == nil || api.Bucket.Interval() != 100*time.Millisecond || api.Bucket.Refill() != 5*time.Second || api.MaxWindow() != time.Hour {
		t.Fatalf("api: %+v", api)
	}
	if s := set.Rule("stuffing"); s.Distinct != "email" || s.Bucket != nil {
		t.Fatalf("stuffing: %+v", s)
	}
	// A bucket-only rule looks back as long as it takes to refill, in whole
	// seconds: 2 tokens at one per 20s.
	if got := set.MaxWindowFor("slow", "ip"); got != 40*time.Second {
		t.Fatalf("slow: max window %s, want 40s", got)
	}
	if b := (Bucket{Rate: Limit{Count: 3, Window: time.Second}, Burst: 1}); b.Interval() != 333333*time.Microsecond {
		t.Fatalf("3/s interval %s, want 333.333ms", b.Interval())
	}
}

func TestLoadErrorNamesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, p, "rules:\n  - name: a\n    action: x\n    kinds: [ip]\n    limits: [0/s]\n")
	_, err := Load(p)
	if err == nil || !strings.HasPrefix(err.Error(), p+":5: ") {
		t.Fatalf("err = %v, want prefix %q", err, p+":5: ")
	}
}

func writeFile(tb testing.TB, path, content string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}

func TestSourceIsTheTextParsed(t *testing.T) {
	text := "rules:\n  - {name: a, action: x, kinds: [ip], limits: [5/m]}\n"
	s, err := Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Source()) != text {
		t.Fatalf("Source() = %q, want the text parsed", s.Source())
	}
	if d := s.Derive(func(r *Rule) *Rule { return r }); d.Source() != nil {
		t.Fatalf("a derived set has a source: %q", d.Source())
	}
}
