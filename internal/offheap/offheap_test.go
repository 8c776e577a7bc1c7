package offheap

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
)

type rec struct {
	a [3]int32
	b uint16
}

// Values keep their place across growth, read back what was written, and
// start from zero after a Reset.
func TestArrayGrowsWithoutMoving(t *testing.T) {
	var a Array[rec]
	defer a.Free()
	n := 3 * (chunkBytes / 16)
	first := a.At(a.Append())
	first.a[0] = 7
	for i := 1; i < n; i++ {
		a.At(a.Append()).a[1] = int32(i)
	}
	runtime.GC()
	if a.At(0) != first || first.a[0] != 7 {
		t.Fatal("the first value moved or changed")
	}
	for i := 1; i < n; i++ {
		if got := a.At(i).a[1]; got != int32(i) {
			t.Fatalf("value %d: %d", i, got)
		}
	}
	if a.Len() != n || a.Bytes() < n*16 {
		t.Fatalf("len %d, bytes %d", a.Len(), a.Bytes())
	}
	a.Reset()
	if a.Len() != 0 || a.Bytes() != 0 {
		t.Fatalf("after reset: len %d, bytes %d", a.Len(), a.Bytes())
	}
	if v := a.At(a.Append()); *v != (rec{}) {
		t.Fatalf("a value after a reset is not zero: %+v", *v)
	}
}

func TestArenaHoldsStrings(t *testing.T) {
	var a Arena
	defer a.Free()
	offs := map[string]uint32{}
	for i := range 100_000 {
		s := fmt.Sprintf("login:ip:10.0.%d.%d", i>>8, i&255)
		off, ok := a.Add([]byte(s))
		if !ok {
			t.Fatalf("add %q refused", s)
		}
		offs[s] = off
	}
	for s, off := range offs {
		if got := a.Get(off, len(s)); !bytes.Equal(got, []byte(s)) {
			t.Fatalf("got %q, want %q", got, s)
		}
	}
	if _, ok := a.Add(make([]byte, MaxString+1)); ok {
		t.Fatal("a string over MaxString was taken")
	}
	big := bytes.Repeat([]byte("x"), MaxString)
	off, ok := a.Add(big)
	if !ok || !bytes.Equal(a.Get(off, len(big)), big) {
		t.Fatal("a string of MaxString bytes was not kept whole")
	}
}

func TestMakeRefusesPointers(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Make took a type with pointers")
		}
	}()
	Make[struct{ p *int }](1)
}

func TestMakeFree(t *testing.T) {
	before := Mapped()
	s := Make[uint32](1000)
	if Mapped() != before+4000 {
		t.Fatalf("mapped %d, want %d", Mapped(), before+4000)
	}
	for i := range s {
		s[i] = uint32(i)
	}
	if s[999] != 999 {
		t.Fatal("lost a value")
	}
	Free(s)
	if Mapped() != before {
		t.Fatalf("mapped %d after free, want %d", Mapped(), before)
	}
	Free(make([]uint32, 3)) // not mapped here: left to the collector
	Free[uint32](nil)
}
