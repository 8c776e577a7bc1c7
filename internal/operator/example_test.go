package operator_test

import (
	"fmt"

	"github.com/floodgate-dev/floodgate/internal/operator"
)

// Admin tokens name their holders: the name is the operator the audit
// records for what each does.
func ExampleParseTokens() {
	tokens, err := operator.ParseTokens([]string{"alice=s3cr3t-0123456789abcdef", "oncall-bot=another-secret-0123456789"})
	fmt.Println(len(tokens), tokens[0].Name, tokens[1].Name, err)
	_, err = operator.ParseTokens([]string{"alice=short"})
	fmt.Println(err)
	// Output:
	// 2 alice oncall-bot <nil>
	// admin token "alice": secret shorter than 16 bytes
}

// A ban lasts a duration of the one grammar (docs/operations.md), 1s to 366d.
func ExampleParseFor() {
	for _, v := range []string{"90s", "1h30m", "2d", "1w", "367d", "1x"} {
		d, err := operator.ParseFor(v)
		fmt.Println(d, err)
	}
	// Output:
	// 1m30s <nil>
	// 1h30m0s <nil>
	// 48h0m0s <nil>
	// 168h0m0s <nil>
	// 0s duration "367d": want 1s to 366d, e.g. 90s, 30m, 1h30m, 2d
	// 0s duration "1x": unknown unit "x"; want a number and a unit ms, s, m, h, d or w, e.g. 50ms, 90s, 1h30m, 2d, 1w
}
