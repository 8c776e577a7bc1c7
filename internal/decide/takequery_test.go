package decide_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// TakeQuery plans a subject from the rules alone: its limits, whether
// they block (shadow rules and allowlists do not), the longest window of
// its action and kind, whether it is counted, and only the related values
// a distinct limit counts; a subject not as the limiter sends it is an
// error, one without rules gets no limits.
func TestTakeQueryPlansFromTheRules(t *testing.T) {
	set, err := rules.Parse([]byte(`
rules:
  - name: reset
    action: reset
    kinds: [email, ip]
    limits: [5/1m, 20/1h]
    strict: true
    allow: [ok@example.com]
  - name: spread
    action: reset
    kinds: [ip]
    distinct: email
    limits: [3/1h]
  - name: watch
    action: reset
    kinds: [email]
    limits: [1/1m]
    shadow: true
`))
	if err != nil {
		t.Fatal(err)
	}
	sub := func(kind, s string) window.Subject { return window.Subject{Action: "reset", Kind: kind, Subject: s} }
	values := map[string]string{"email": "a@example.com", "ua": "curl"}

	q, err := decide.TakeQuery(set, sub("ip", "198.51.100.7"), values)
	if err != nil {
		t.Fatal(err)
	}
	if !q.Count || q.MaxWindow != time.Hour || len(q.Limits) != 3 || q.Limits[2].Distinct != "email" || !q.Limits[0].Block ||
		!slices.Equal(q.BlockRules, []string{"reset", "spread"}) || !maps.Equal(q.Values, map[string]string{"email": "a@example.com"}) {
		t.Errorf("ip: %+v", q)
	}
	q, err = decide.TakeQuery(set, sub("email", "ok@example.com"), values)
	if err != nil {
		t.Fatal(err)
	}
	if !q.Count || len(q.Limits) != 3 || q.Limits[0].Block || q.Limits[2].Block || len(q.BlockRules) != 0 || q.Values != nil {
		t.Errorf("allowlisted e-mail beside a shadow rule: %+v", q)
	}
	q, err = decide.TakeQuery(set, window.Subject{Action: "login", Kind: "ip", Subject: "198.51.100.7"}, nil)
	if err != nil || q.Count || len(q.Limits) != 0 || q.MaxWindow != 0 {
		t.Errorf("no rules: %+v %v", q, err)
	}
	for _, s := range []window.Subject{sub("ip", "2001:db8::1"), sub("email", strings.Repeat("a", 300))} {
		if _, err := decide.TakeQuery(set, s, nil); err == nil || !strings.Contains(err.Error(), "is taken as") {
			t.Errorf("%s: %v, want an error: not canonical", s.Subject[:min(len(s.Subject), 20)], err)
		}
	}
}
