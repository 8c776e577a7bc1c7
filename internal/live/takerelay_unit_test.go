package live

import "testing"

// The cursor reads back what it writes, pending or not, and refuses
// anything else rather than guessing a position.
func TestTakeCursorRoundTrip(t *testing.T) {
	for _, c := range []takeCursor{
		{owner: "k3x", last: "0-0"},
		{owner: "k3x", last: "1795771658632-1"},
		{owner: "k3x", last: "1-0", pending: "2-5", from: 42, since: 1795771658632},
	} {
		got, err := parseTakeCursor(c.String())
		if err != nil || got != c {
			t.Errorf("parse(%q) = %+v, %v; want %+v", c.String(), got, err, c)
		}
	}
	// none stored, and cursors written before owner tokens
	for v, want := range map[string]takeCursor{
		"":                      {last: "0-0"},
		"7-1":                   {last: "7-1"},
		"1-0 2-5 42 1795771658": {last: "1-0", pending: "2-5", from: 42, since: 1795771658},
	} {
		if got, err := parseTakeCursor(v); err != nil || got != want {
			t.Errorf("parse(%q) = %+v, %v; want %+v", v, got, err, want)
		}
	}
	for _, bad := range []string{"@", "@k", "@k 1-0 2-0", "1-0 2-0", "1-0 2-0 x 5", "1-0 2-0 3 4 5", "@k 1-0 2-0 3 4 5"} {
		if _, err := parseTakeCursor(bad); err == nil {
			t.Errorf("parse(%q): no error", bad)
		}
	}
}

// Stream ids order by milliseconds, then sequence, as numbers, and the
// id after one is the least id past it.
func TestStreamIDOrder(t *testing.T) {
	for _, c := range []struct {
		a, b string
		less bool
	}{
		{"0-0", "1-0", true},
		{"9-0", "10-0", true}, // not string order
		{"10-2", "10-10", true},
		{"10-10", "10-2", false},
		{"5-1", "5-1", false},
	} {
		if got := streamIDLess(c.a, c.b); got != c.less {
			t.Errorf("%s < %s = %v, want %v", c.a, c.b, got, c.less)
		}
	}
	if n := nextStreamID("10-9"); n != "10-10" || !streamIDLess("10-9", n) {
		t.Errorf("next of 10-9 = %s", n)
	}
}
