package rules

import (
	"slices"
	"strings"
	"testing"
)

func mustParse(t *testing.T, yaml string) *Set {
	t.Helper()
	s, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return s
}

// findings writes each finding as "type action/kind rule<-other[ window]".
func findings(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		s := string(f.Type) + " " + f.Action + "/" + f.Kind + " " + f.Rule + "<-" + f.Other
		if f.Window > 0 {
			s += " " + FormatWindow(f.Window)
		}
		out = append(out, s)
	}
	return out
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		rules string
		want  []string
	}{
		{name: "the example file is clean", rules: "file:../../examples/rules.yaml"},
		{name: "different windows", rules: `
  - {name: a, action: x, kinds: [ip], limits: [5/m]}
  - {name: b, action: x, kinds: [ip], limits: [50/h]}`},
		{name: "same window, tighter first: the looser is unreachable", rules: `
  - {name: a, action: x, kinds: [ip], limits: [5/m]}
  - {name: b, action: x, kinds: [ip, email], limits: [10/m]}`,
			want: []string{"overlap x/ip b<-a 1m", "unreachable x/ip b<-a"}},
		{name: "a looser rule earlier in the file is unreachable too", rules: `
  - {name: a, action: x, kinds: [ip], limits: [10/m, 100/h]}
  - {name: b, action: x, kinds: [ip], limits: [5/m, 50/h, 500/d]}`,
			want: []string{"unreachable x/ip a<-b", "overlap x/ip b<-a 1m", "overlap x/ip b<-a 1h"}},
		{name: "one limit tighter: both reachable", rules: `
  - {name: a, action: x, kinds: [ip], limits: [10/m, 20/h]}
  - {name: b, action: x, kinds: [ip], limits: [5/m, 50/h]}`,
			want: []string{"overlap x/ip b<-a 1m", "overlap x/ip b<-a 1h"}},
		{name: "a window the other lacks: reachable", rules: `
  - {name: a, action: x, kinds: [ip], limits: [5/m]}
  - {name: b, action: x, kinds: [ip], limits: [10/m, 30/h]}`,
			want: []string{"overlap x/ip b<-a 1m"}},
		{name: "identical limits: only the later is unreachable", rules: `
  - {name: a, action: x, kinds: [ip], limits: [5/m]}
  - {name: b, action: x, kinds: [ip], limits: [5/m]}`,
			want: []string{"overlap x/ip b<-a 1m", "unreachable x/ip b<-a"}},
		{name: "identical limits, the earlier allowlisted: it cannot hide the later", rules: `
  - {name: a, action: x, kinds: [ip], limits: [5/m], allow: [10.0.0.1]}
  - {name: b, action: x, kinds: [ip], limits: [5/m]}`,
			want: []string{"unreachable x/ip a<-b", "overlap x/ip b<-a 1m"}},
		{name: "a bucket keeps a rule reachable", rules: `
  - {name: a, action: x, kinds: [ip], limits: [5/m]}
  - {name: b, action: x, kinds: [ip], limits: [10/m], bucket: {rate: 1/s, burst: 3}}`,
			want: []string{"overlap x/ip b<-a 1m"}},
		{name: "shadow rules are not compared", rules: `
  - {name: a, action: x, kinds: [ip], limits: [5/m], shadow: true}
  - {name: b, action: x, kinds: [ip], limits: [10/m]}`},
		{name: "strict and plain are not compared", rules: `
  - {name: a, action: x, kinds: [ip], limits: [5/m], strict: true}
  - {name: b, action: x, kinds: [ip], limits: [10/m]}`},
		{name: "distinct and events are not compared", rules: `
  - {name: a, action: x, kinds: [ip], limits: [5/h], distinct: email}
  - {name: b, action: x, kinds: [ip], limits: [10/h]}`},
		{name: "other action or kind", rules: `
  - {name: a, action: x, kinds: [ip], limits: [5/m]}
  - {name: b, action: y, kinds: [ip], limits: [10/m]}
  - {name: c, action: x, kinds: [email], limits: [10/m]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s *Set
			if path, ok := strings.CutPrefix(tt.rules, "file:"); ok {
				var err error
				if s, err = Load(path); err != nil {
					t.Fatal(err)
				}
			} else {
				s = mustParse(t, "rules:"+tt.rules)
			}
			got := findings(s.Check())
			if !slices.Equal(got, tt.want) {
				t.Errorf("Check() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestEffective(t *testing.T) {
	s := mustParse(t, `rules:
  - {name: b, action: y, kinds: [ip, email], limits: [5/m], allow: [10.0.0.0/8, a@example.com], strict: true}
  - {name: a, action: x, kinds: [ip], bucket: {rate: 10/s, burst: 50}, limits: [100/d]}
  - {name: c, action: x, kinds: [ip], distinct: email, limits: [20/h], shadow: true}
`)
	var got []string
	for _, e := range s.Effective() {
		got = append(got, e.Action+" "+e.Kind+" "+e.Rule.Name+" "+e.Rule.Describe())
	}
	want := []string{
		"x ip a limits: 100/1d; bucket: {rate: 10/1s, burst: 50}",
		"x ip c distinct email: 20/1h",
		"y email b limits: 5/1m",
		"y ip b limits: 5/1m",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Effective() =\n%q\nwant\n%q", got, want)
	}
	if n := s.Rule("b").AllowSize(); n != 2 {
		t.Errorf("AllowSize = %d, want 2", n)
	}
	if (*Set)(nil).Effective() != nil || (*Set)(nil).Check() != nil {
		t.Error("a nil set has effective rules or findings")
	}
	f := Finding{Type: Unreachable, Action: "x", Kind: "ip", Rule: "b", Other: "a", Line: 3}
	if !strings.Contains(f.String(), `unreachable: rule "b" never denies x/ip before rule "a"`) {
		t.Errorf("String() = %s", f)
	}
}
