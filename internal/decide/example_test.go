package decide_test

import (
	"fmt"
	"net/url"

	"github.com/floodgate-dev/floodgate/internal/decide"
)

// The HTTP surface reads a check from URL parameters: "action", and every
// other parameter a kind with its subject.
func ExampleParseQuery() {
	req, _ := decide.ParseQuery(url.Values{"action": {"login_failed"}, "ip": {"203.0.113.7"}, "email": {"a@example.com"}})
	fmt.Println(req.Action, req.Subjects)
	// Output:
	// login_failed [{email a@example.com} {ip 203.0.113.7}]
}
