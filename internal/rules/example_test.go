package rules_test

import (
	"fmt"

	"github.com/floodgate-dev/floodgate/internal/rules"
)

func ExampleParse() {
	set, err := rules.Parse([]byte(`
rules:
  - name: login-failed
    action: login_failed
    kinds: [ip, email]
    limits: [2/s, 5/m, 10/h, 100/d]
    allow: [10.0.0.0/8]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range set.Match("login_failed", "ip") {
		fmt.Println(r.Name, r.Limits, r.Allowed("10.1.2.3"), r.Allowed("203.0.113.7"))
	}
	_, err = rules.Parse([]byte("rules:\n  - name: x\n    action: a\n    kinds: [ip]\n    limits: [5/1mo]\n"))
	fmt.Println(err)
	// Output:
	// login-failed [2/1s 5/1m 10/1h 100/1d] true false
	// rules:5: rule "x": limit "5/1mo": window "1mo": unknown unit "mo"; want whole seconds from 1s to 7d, e.g. 30s, 5m, 1h30m, 1d
}
