package live

import (
	"testing"
	"unsafe"

	"floodgate/window"
)

// A copy's key holds strings of its own, equal to the subject's, and its
// hashes are found, replaced and pruned by id.
func TestMirrorCopies(t *testing.T) {
	buf := "owner_visit:ip:10.0.0.1 and the rest of a decoded batch"
	sub := window.Subject{Action: buf[:11], Kind: buf[12:14], Subject: buf[15:23]}
	k := ownKey(sub)
	if k != sub {
		t.Fatalf("key %+v, want %+v", k, sub)
	}
	if unsafe.StringData(k.Subject) == unsafe.StringData(sub.Subject) {
		t.Fatal("key shares the batch's string")
	}
	m := newMirror(10)
	ms := m.subject(sub)
	if m.subject(sub) != ms {
		t.Fatal("second lookup made a new copy")
	}
	s0, h1 := hashID{level: 's', n: 1}, hashID{level: 'h', n: 0}
	m.store(ms, s0, make([]int64, 60))
	m.store(ms, h1, make([]int64, 24))
	m.store(ms, s0, make([]int64, 60))
	if m.hashes != 2 || len(ms.hashes) != 2 {
		t.Fatalf("hashes %d (%d held), want 2", m.hashes, len(ms.hashes))
	}
	ms.add([]bucketSum{{bucketField{s0, 3}, 2}, {bucketField{hashID{level: 'm', n: 9}, 1}, 1}})
	if got := ms.get(s0)[3]; got != 2 {
		t.Fatalf("count %d, want 2", got)
	}
	if ms.get(hashID{level: 'm', n: 9}) != nil {
		t.Fatal("an increment created a hash not loaded")
	}
	// At second 200 a 10 s window cannot read second hash 1 (60..119); the
	// hour's hash 0 it still can.
	if n := ms.prune(200, 10, 0); n != 1 || ms.get(s0) != nil || ms.get(h1) == nil {
		t.Fatalf("pruned %d, kept %v", n, ms.hashes)
	}
	m.hashes--
	m.drop(sub)
	if m.hashes != 0 || len(m.subs) != 0 {
		t.Fatalf("after drop: hashes %d, subjects %d", m.hashes, len(m.subs))
	}
}
