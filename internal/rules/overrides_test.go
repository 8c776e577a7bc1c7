package rules

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const overridesFile = `
plans:
  api_key:
    k_gold: gold
    K_Free: free
  email:
    Big@Corp.example: gold
rules:
  - name: api
    action: api_call
    kinds: [api_key, email]
    limits: [100/d, 10/m]
    overrides:
      - plan: gold
        scale: 10
      - plan: free
        scale: 0.05
      - subjects: [k_vip, k_gold]
        limits: [50/m]
  - name: plain
    action: api_call
    kinds: [api_key]
    limits: [3/s]
kinds:
  api_key: {normalize: [trim, lower]}
`

func TestOverridesGiveSubjectsTheirLimits(t *testing.T) {
	s, err := Parse([]byte(overridesFile))
	if err != nil {
		t.Fatal(err)
	}
	api := s.Rule("api")
	base := []Limit{{10, time.Minute}, {100, 24 * time.Hour}}
	tests := []struct {
		kind, subject string
		want          []Limit
		by            string
	}{
		{"api_key", "k_other", base, ""},
		{"api_key", "k_vip", []Limit{{50, time.Minute}, {100, 24 * time.Hour}}, "subject"},
		// a subject override wins over the subject's plan
		{"api_key", "k_gold", []Limit{{50, time.Minute}, {100, 24 * time.Hour}}, "subject"},
		// the table's subjects are normalized as the kind says
		{"api_key", "k_free", []Limit{{1, time.Minute}, {5, 24 * time.Hour}}, "plan free"},
		{"email", "big@corp.example", []Limit{{100, time.Minute}, {1000, 24 * time.Hour}}, "plan gold"},
		// a plan is per kind: k_gold of kind email is on no plan
		{"email", "k_gold", []Limit{{50, time.Minute}, {100, 24 * time.Hour}}, "subject"},
		{"email", "x@y.example", base, ""},
	}
	for _, tt := range tests {
		got, ov := s.Limits(api, tt.kind, tt.subject)
		if !slices.Equal(got, tt.want) || ov.Name() != tt.by {
			t.Errorf("Limits(%s=%s) = %v by %q, want %v by %q", tt.kind, tt.subject, got, ov.Name(), tt.want, tt.by)
		}
	}
	if got, ov := s.Limits(s.Rule("plain"), "api_key", "k_gold"); !slices.Equal(got, []Limit{{3, time.Second}}) || ov != nil {
		t.Errorf("a rule without overrides: %v %v", got, ov)
	}
	if s.PlanSize() != 3 || s.Plan("api_key", "k_free") != "free" {
		t.Errorf("plans: size %d, k_free on %q", s.PlanSize(), s.Plan("api_key", "k_free"))
	}
}

func TestOverridesSurviveDerive(t *testing.T) {
	s, err := Parse([]byte(overridesFile))
	if err != nil {
		t.Fatal(err)
	}
	// A backtest from history drops the windows minute buckets cannot
	// answer; the overrides follow the rule's remaining limits.
	d := s.Derive(func(r *Rule) *Rule {
		c := *r
		c.Limits = slices.DeleteFunc(slices.Clone(r.Limits), func(l Limit) bool { return l.Window < time.Hour })
		if len(c.Limits) == 0 {
			return nil
		}
		return &c
	})
	got, ov := d.Limits(d.Rule("api"), "api_key", "k_gold")
	if !slices.Equal(got, []Limit{{100, 24 * time.Hour}}) || ov == nil {
		t.Fatalf("derived: %v %v", got, ov)
	}
	if got, _ := s.Limits(s.Rule("api"), "api_key", "k_gold"); len(got) != 2 {
		t.Fatalf("the original set changed: %v", got)
	}
	if d.Plan("email", "big@corp.example") != "gold" {
		t.Fatal("the derived set lost the plans table")
	}
}

func TestOverridesRefused(t *testing.T) {
	rule := func(extra string) string {
		return "rules:\n  - name: r\n    action: a\n    kinds: [k]\n    limits: [5/m]\n" + extra
	}
	tests := []struct{ file, err string }{
		{rule("    overrides:\n      - plan: gold\n"), "give scale or limits"},
		{rule("    overrides:\n      - scale: 2\n"), "give plan or subjects"},
		{rule("    overrides:\n      - plan: gold\n        subjects: [x]\n        scale: 2\n"), "give plan or subjects"},
		{rule("    overrides:\n      - plan: gold\n        scale: 2\n        limits: [9/m]\n"), "give scale or limits"},
		{rule("    overrides:\n      - plan: gold\n        limits: [9/h]\n"), "the rule has no 1h window"},
		{rule("    overrides:\n      - plan: gold\n        scale: 0\n"), "want a number above 0"},
		{rule("    overrides:\n      - plan: gold\n        scale: -1\n"), "want a number above 0"},
		{rule("    overrides:\n      - plan: gold\n        scale: NaN\n"), "want a number above 0"},
		{rule("    overrides:\n      - plan: Gold\n        scale: 2\n"), "only [a-z0-9_.-]"},
		{rule("    overrides:\n      - plan: gold\n        scale: 2\n      - plan: gold\n        scale: 3\n"), "already overridden"},
		{rule("    overrides:\n      - plan: gold\n        scale: 2\n        color: red\n"), "unknown key \"color\""},
		{rule("    overrides: gold\n"), "want a list"},
		{"rules:\n  - name: r\n    action: a\n    kinds: [k]\n    bucket: {rate: 1/s, burst: 2}\n    overrides:\n      - plan: gold\n        scale: 2\n", "a rule with a bucket"},
		{"plans: [x]\nrules: []\n", "plans: want a mapping"},
		{"plans:\n  k: {a: Gold}\nrules: []\n", "plan \"Gold\""},
		{"plans:\n  k: {a: gold, a: free}\nrules: []\n", "given twice"},
		{"plans:\n  email: {A@x.example: gold, a@x.example: free}\nrules: []\n", "one subject once normalized"},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.file))
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tt.file, err, tt.err)
		}
	}
}

func TestScaleRoundsDownToAtLeastOne(t *testing.T) {
	o := Override{Scale: 0.3}
	got := o.apply([]Limit{{5, time.Minute}, {2, time.Second}})
	if !slices.Equal(got, []Limit{{1, time.Second}, {1, time.Minute}}) {
		t.Fatalf("%v", got)
	}
	o = Override{Scale: 2.5}
	if got := o.apply([]Limit{{3, time.Minute}}); got[0].Count != 7 {
		t.Fatalf("%v", got)
	}
}

func TestCheckWarnsOfAnEmptyPlan(t *testing.T) {
	s, err := Parse([]byte(strings.Replace(overridesFile, "kinds:\n  api_key", `  - name: other
    action: api_call
    kinds: [email]
    limits: [9/h]
    overrides:
      - plan: free
        scale: 2
kinds:
  api_key`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range s.Check() {
		got = append(got, f.String())
	}
	// free has an api_key subject, but none of kind email: rule api is
	// fine, rule other (kind email) overrides a plan nobody of its kind is on.
	want := []string{`empty plan: rule "other" overrides plan "free", and the plans: table puts no subject of its kinds (email) on it`}
	if !slices.Equal(got, want) {
		t.Fatalf("findings %q, want %q", got, want)
	}
	if d := s.Rule("api").Describe(); d != "limits: 10/1m 100/1d; plan gold: scale 10; plan free: scale 0.05; 2 subjects: limits 50/1m" {
		t.Fatalf("Describe: %s", d)
	}
	if got := s.PlanSizes(); !slices.Equal(got, []PlanSize{{"api_key", "free", 1}, {"api_key", "gold", 1}, {"email", "gold", 1}}) {
		t.Fatalf("PlanSizes: %v", got)
	}
}
