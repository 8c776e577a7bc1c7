package operator_test

import (
	"reflect"
	"testing"

	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// A subject is kind=value, the value may hold '='; anything else names
// the argument.
func TestParseSubjects(t *testing.T) {
	got, err := operator.ParseSubjects([]string{"ip=203.0.113.7", "token=a=b"})
	want := []limitapi.Subject{{Kind: "ip", Subject: "203.0.113.7"}, {Kind: "token", Subject: "a=b"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	if _, err := operator.ParseSubjects([]string{"203.0.113.7"}); err == nil || err.Error() != `subject "203.0.113.7": want kind=value, e.g. ip=203.0.113.7` {
		t.Errorf("no kind: %v", err)
	}
}
