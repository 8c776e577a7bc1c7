package live

import (
	"testing"

	"github.com/floodgate-dev/floodgate/internal/window"
)

// The builder names the keys window names: a load or checkpoint that wrote
// elsewhere would lose every count it holds.
func TestBucketKeysMatchWindow(t *testing.T) {
	keys := window.Keys{Prefix: "fg"}
	var b bucketKeys
	var fk []byte
	for _, sub := range []window.Subject{
		{Action: "login", Kind: "ip", Subject: "203.0.113.7"},
		{Action: "a", Kind: "email", Subject: "zoë@exämple.com"},
		{Action: "visit", Kind: "link", Subject: "x:y:z"},
	} {
		for _, p := range []int{0, 11} {
			b.subjectOf(keys.Slot(p), sub, &fk)
			for _, id := range []hashID{{'s', 28333333}, {'m', 472222}, {'h', 7870}, {'s', -1}, {'h', 0}} {
				want := window.BucketKey(keys.SubjectPrefix(p, sub), id.level, id.n)
				if got := b.key(id.level, id.n); got != want {
					t.Fatalf("key(%q, %d, %c:%d) = %q, want %q", sub, p, id.level, id.n, got, want)
				}
			}
		}
	}
}
