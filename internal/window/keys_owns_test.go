package window_test

import (
	"testing"

	"github.com/floodgate-dev/floodgate/internal/window"
)

func TestKeysOwnsOnlyTheirShapes(t *testing.T) {
	k := window.Keys{Prefix: "fg*[1]"}
	if got, want := k.Pattern(), `{fg\*\[1\]:p[0-9]*`; got != want {
		t.Errorf("Pattern() = %q, want %q", got, want)
	}
	for key, want := range map[string]bool{
		k.State(3):                          true,
		k.Offset("g", "t", 11):              true,
		"{fg*[1]:p12}:login:ip:1.2.3.4:s:1": true,
		"{fg*[1]:p1x}:cache":                false,
		"{fg*[1]:payments}:1":               false,
		"{fg*[1]:p}:x":                      false,
		"{fg*[1]:p1}":                       false,
		"{fgX[1]:p1}:@state":                false,
		"fg*[1]:p1:@state":                  false,
		"{fg*[1]:p1234567890}:@state":       false,
	} {
		if got := k.Owns(key); got != want {
			t.Errorf("Owns(%q) = %v, want %v", key, got, want)
		}
	}
}
