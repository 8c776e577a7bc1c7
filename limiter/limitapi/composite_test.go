package limitapi_test

import (
	"testing"

	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

func TestComposite(t *testing.T) {
	kind, sub := limitapi.Composite([]string{"ip", "path"}, []string{"203.0.113.7", "/login"})
	if kind != "ip.path" || sub != "203.0.113.7|/login" {
		t.Fatalf("got %q %q", kind, sub)
	}
	// Values holding the separator or the escape never meet another list.
	seen := map[string][]string{}
	for _, vs := range [][]string{
		{"a|b", "c"}, {"a", "b|c"}, {"a\\", "|c"}, {"a\\|", "c"}, {"a", "\\|c"}, {"a|", "b", "c"}, {"a", "", "b|c"},
	} {
		_, s := limitapi.Composite([]string{"x", "y", "z"}[:len(vs)], vs)
		if prev, ok := seen[s]; ok {
			t.Errorf("%q and %q both give %q", prev, vs, s)
		}
		seen[s] = vs
	}
}
