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

// TestInternSkipsInvalidNames: a name checkName refuses — longer than any
// valid one, or with characters a name cannot hold — is decoded but not
// kept, so a producer cannot pin large strings in the table, nor fill it
// with events that are dead-lettered anyway.
func TestInternSkipsInvalidNames(t *testing.T) {
	for _, bad := range []string{strings.Repeat("x", MaxNameLen+1), "Login", "a b", "é"} {
		if got := intern([]byte(bad)); got != bad {
			t.Fatalf("intern changed %q into %q", bad, got)
		}
		if m := names.Load(); m != nil {
			if _, kept := (*m)[bad]; kept {
				t.Fatalf("the invalid name %.20q was kept", bad)
			}
		}
	}
}
