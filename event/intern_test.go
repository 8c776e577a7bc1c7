package event

import (
	"strconv"
	"strings"
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

// TestInternSkipsLongNames: a name longer than any valid one is decoded but
// not kept, so a producer cannot pin large strings in the table.
func TestInternSkipsLongNames(t *testing.T) {
	long := strings.Repeat("x", MaxNameLen+1)
	if got := intern([]byte(long)); got != long {
		t.Fatalf("intern changed a long name")
	}
	if m := names.Load(); m != nil {
		if _, kept := (*m)[long]; kept {
			t.Fatalf("a name of %d bytes was kept", len(long))
		}
	}
}
