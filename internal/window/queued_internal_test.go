package window

import "testing"

// A take stream field reads back as the key and value the take wrote,
// whatever bytes they hold; a field not of that shape is an error, not a
// guess.
func TestQueuedEventRoundTrip(t *testing.T) {
	for _, e := range []QueuedEvent{
		{Key: []byte("email:a@example.com"), Value: []byte(`{"v":1}`)},
		{Key: []byte("ip:1:2"), Value: []byte("12:x")},
		{Key: nil, Value: []byte("v")},
	} {
		k, v, err := ParseQueuedEvent(e.encode())
		if err != nil || string(k) != string(e.Key) || string(v) != string(e.Value) {
			t.Errorf("%q -> %q %q %v", e.encode(), k, v, err)
		}
	}
	for _, bad := range []string{"", "x", "5:abc", "-1:abc", "abc:def"} {
		if _, _, err := ParseQueuedEvent(bad); err == nil {
			t.Errorf("ParseQueuedEvent(%q): no error", bad)
		}
	}
}
