package event

import (
	"strconv"
	"testing"
	"unsafe"
)

// TestInternBounded: a name seen again is the same string, and names past
// maxNames are still decoded right, only not kept.
func TestInternBounded(t *testing.T) {
	a, b := intern([]byte("intern_test_login")), intern([]byte("intern_test_login"))
	if a != "intern_test_login" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("not interned: %q %q", a, b)
	}
	for i := range 2 * maxNames {
		name := "intern_test_" + strconv.Itoa(i)
		if got := intern([]byte(name)); got != name {
			t.Fatalf("intern(%q) = %q", name, got)
		}
	}
	if n := len(*names.Load()); n > maxNames {
		t.Fatalf("%d names kept, bound %d", n, maxNames)
	}
}
