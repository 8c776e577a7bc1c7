package live

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/floodgate-dev/floodgate/internal/offheap"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// A subject's copies are found, replaced, pruned and dropped by hash id,
// and blocks freed are used again.
func TestMirrorCopies(t *testing.T) {
	h := NewHeadroom(10)
	sub := window.Subject{Action: "owner_visit", Kind: "ip", Subject: "10.0.0.1"}
	r := h.roomFor(sub, 2)
	if r == nil || h.roomFor(sub, 2) != r || h.roomOf(sub) != r {
		t.Fatal("second lookup made a new room")
	}
	m := h.mir
	s0, h1 := hashID{level: 's', n: 1}, hashID{level: 'h', n: 0}
	m.store(r, s0, make([]int64, 60))
	m.store(r, h1, make([]int64, 24))
	m.store(r, s0, make([]int64, 60))
	if m.hashes != 2 || h.t.blocks.Len() != 2 {
		t.Fatalf("hashes %d (%d blocks), want 2", m.hashes, h.t.blocks.Len())
	}
	m.addSums(r, []bucketSum{{bucketField{s0, 3}, 2}, {bucketField{hashID{level: 'm', n: 9}, 1}, 1}})
	if c, ok := m.get(r, s0); !ok || c.at(3) != 2 {
		t.Fatalf("count %v, want 2", c.at(3))
	}
	if _, ok := m.get(r, hashID{level: 'm', n: 9}); ok {
		t.Fatal("an increment created a hash not loaded")
	}
	// At second 200 a 10 s window cannot read second hash 1 (60..119); the
	// hour's hash 0 it still can.
	if n := m.prune(r, 200, 10, 0); n != 1 || m.hashes != 1 {
		t.Fatalf("pruned %d, %d left", n, m.hashes)
	}
	if _, ok := m.get(r, s0); ok {
		t.Fatal("a pruned hash is still held")
	}
	if _, ok := m.get(r, h1); !ok {
		t.Fatal("a readable hash was pruned")
	}
	m.drop(r)
	if m.hashes != 0 || r.copies != 0 {
		t.Fatalf("after drop: hashes %d", m.hashes)
	}
	m.store(r, s0, make([]int64, 60))
	m.store(r, h1, make([]int64, 24))
	if h.t.blocks.Len() != 2 {
		t.Fatalf("%d blocks: freed ones were not used again", h.t.blocks.Len())
	}
}

// Counts past 16 bits, and past 32, are kept exactly, loaded or added.
func TestMirrorWideCounts(t *testing.T) {
	h := NewHeadroom(10)
	r := h.roomFor(window.Subject{Action: "a", Kind: "ip", Subject: "x"}, 1)
	m := h.mir
	id := hashID{level: 'h', n: 5}
	loaded := make([]int64, 24)
	loaded[1] = 1 << 40
	m.store(r, id, loaded)
	m.addSums(r, []bucketSum{{bucketField{id, 1}, 3}, {bucketField{id, 2}, math.MaxInt32}})
	m.addSums(r, []bucketSum{{bucketField{id, 2}, 1}})
	c, _ := m.get(r, id)
	if c.at(1) != 1<<40+3 || c.at(2) != math.MaxInt32+1 {
		t.Fatalf("counts %d, %d", c.at(1), c.at(2))
	}
	narrow := hashID{level: 's', n: 1}
	m.store(r, narrow, make([]int64, 60))
	m.addSums(r, []bucketSum{{bucketField{narrow, 0}, -7}, {bucketField{narrow, 59}, math.MaxInt16}})
	if c, _ := m.get(r, narrow); c.w != nil || c.at(59) != math.MaxInt16 || c.at(0) != -7 {
		t.Fatalf("narrow block: wide %v, counts %d, %d", c.w != nil, c.at(59), c.at(0))
	}
	m.addSums(r, []bucketSum{{bucketField{narrow, 59}, 1}, {bucketField{narrow, 58}, 1}})
	if c, _ := m.get(r, narrow); c.w == nil || c.at(59) != math.MaxInt16+1 || c.at(58) != 1 || c.at(0) != -7 {
		t.Fatalf("widened block: wide %v, counts %d, %d, %d", c.w != nil, c.at(59), c.at(58), c.at(0))
	}
	m.drop(r)
	if len(m.wide) != 0 {
		t.Fatalf("%d wide copies left after drop", len(m.wide))
	}
}

// A segment's sum is its fields' counts added one by one, narrow or wide,
// and nothing for an empty one.
func TestCountsSum(t *testing.T) {
	h := NewHeadroom(10)
	r := h.roomFor(window.Subject{Action: "a", Kind: "ip", Subject: "x"}, 1)
	narrow, wide := hashID{level: 's', n: 1}, hashID{level: 'm', n: 1}
	vals := make([]int64, 60)
	for k := range vals {
		vals[k] = int64(k*k%17) - 3
	}
	h.mir.store(r, narrow, vals)
	vals[7] = 1 << 40
	h.mir.store(r, wide, vals)
	for _, id := range []hashID{narrow, wide} {
		c, _ := h.mir.get(r, id)
		for lo := int64(0); lo < 60; lo++ {
			for hi := lo - 1; hi < 60; hi++ {
				var want int64
				for k := lo; k <= hi; k++ {
					want += c.at(k)
				}
				if got := c.sum(lo, hi); got != want {
					t.Fatalf("%c %d..%d: sum %d, want %d", id.level, lo, hi, got, want)
				}
			}
		}
	}
}

// The subject table finds every key it holds and no other, across its
// growth, and an eviction forgets them all.
func TestSubjectTable(t *testing.T) {
	h := NewHeadroom(1 << 20)
	const n = 50_000
	sub := func(i int) window.Subject {
		return window.Subject{Action: "login", Kind: "ip", Subject: fmt.Sprintf("10.%d.%d", i>>8, i&255)}
	}
	for i := range n {
		r := h.roomFor(sub(i), 1+i%3)
		if r == nil {
			t.Fatalf("subject %d not held", i)
		}
		r.at = uint32(i)
	}
	for i := range n {
		r := h.roomOf(sub(i))
		if r == nil || r.at != uint32(i) || int(r.n) != 1+i%3 {
			t.Fatalf("subject %d: %+v", i, r)
		}
	}
	if h.roomOf(window.Subject{Action: "login", Kind: "ip", Subject: "10.0"}) != nil {
		t.Fatal("found a subject never added")
	}
	if h.Resident().Subjects != n {
		t.Fatalf("resident %d", h.Resident().Subjects)
	}
	h.use(nil, 1<<20)
	if h.Resident().Subjects != 0 || h.roomOf(sub(1)) != nil {
		t.Fatal("a batch over the bound did not forget the subjects")
	}
}

// A Headroom's tables go back to the kernel once it is collected: a sink
// drops a revoked partition's Headroom without closing anything.
func TestHeadroomTablesFreedWhenCollected(t *testing.T) {
	settled := func() int64 { // other tests' Headrooms freed first
		last := int64(-1)
		for range 100 {
			runtime.GC()
			runtime.Gosched()
			if n := offheap.Mapped(); n == last {
				return n
			} else {
				last = n
			}
		}
		return last
	}
	before := settled()
	func() {
		h := NewHeadroom(1000)
		for i := range 100 {
			r := h.roomFor(window.Subject{Action: "a", Kind: "ip", Subject: fmt.Sprint(i)}, 1)
			h.mir.store(r, hashID{level: 's', n: 1}, make([]int64, 60))
		}
		if offheap.Mapped() <= before {
			t.Fatal("nothing mapped")
		}
	}()
	for range 1000 {
		runtime.GC() // cleanups run on their own goroutine after a cycle
		if offheap.Mapped() == before {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("mapped %d bytes, %d before the Headroom", offheap.Mapped(), before)
}
