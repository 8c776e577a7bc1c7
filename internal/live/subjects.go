package live

import (
	"hash/maphash"
	"math"

	"github.com/floodgate-dev/floodgate/internal/offheap"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// keyed is a table of values of T by byte-string key outside the Go heap
// (package offheap), for what the owner keeps of every subject: a value
// costs its size, its key's length plus 8 bytes, and two to four index
// slots (8 to 16 bytes); on the Go heap the same would cost twice that in
// RSS, and a map of strings more. Entries are dropped all at once (reset),
// so a pointer to a value stays valid until then. The zero value is not
// usable (newKeyed).
type keyed[T any] struct {
	seed  maphash.Seed
	index []uint32 // open addressing, linear probing: entry + 1; 0 empty
	refs  offheap.Array[keyRef]
	vals  offheap.Array[T]
	keys  offheap.Arena
}

type keyRef struct {
	off uint32
	n   uint32
}

// newKeyed returns an empty table. Its seed is random: a client choosing
// subjects cannot make their keys collide.
func newKeyed[T any]() *keyed[T] { return &keyed[T]{seed: maphash.MakeSeed()} }

func (t *keyed[T]) len() int { return t.vals.Len() }

// at returns entry i's value; key its key (valid until reset).
func (t *keyed[T]) at(i int) *T { return t.vals.At(i) }

func (t *keyed[T]) key(i int) []byte {
	r := t.refs.At(i)
	return t.keys.Get(r.off, int(r.n))
}

// get returns key's value, nil when not held.
func (t *keyed[T]) get(key []byte) *T {
	if i, _ := t.find(key); i >= 0 {
		return t.vals.At(i)
	}
	return nil
}

// find returns key's entry, or -1 and the index slot to insert it at.
func (t *keyed[T]) find(key []byte) (int, int) {
	if len(t.index) == 0 {
		return -1, -1
	}
	mask := len(t.index) - 1
	i := int(maphash.Bytes(t.seed, key)) & mask
	for {
		v := t.index[i]
		if v == 0 {
			return -1, i
		}
		if string(t.key(int(v-1))) == string(key) {
			return int(v - 1), i
		}
		i = (i + 1) & mask
	}
}

// add returns key's value, adding a zero one when not held (added true);
// nil when the key cannot be held (the arena's 4 GiB or the index's 2^31
// entries full).
func (t *keyed[T]) add(key []byte) (v *T, added bool) {
	if i, _ := t.find(key); i >= 0 {
		return t.vals.At(i), false
	}
	if t.len() >= math.MaxInt32-1 {
		return nil, false
	}
	if 2*(t.len()+1) > len(t.index) {
		t.grow()
	}
	off, ok := t.keys.Add(key)
	if !ok {
		return nil, false
	}
	_, slot := t.find(key)
	i := t.vals.Append()
	*t.refs.At(t.refs.Append()) = keyRef{off, uint32(len(key))}
	t.index[slot] = uint32(i + 1)
	return t.vals.At(i), true
}

// grow doubles the index (at most half full: probes stay short) and
// places every entry again.
func (t *keyed[T]) grow() {
	old := t.index
	t.index = offheap.Make[uint32](max(2*len(old), 1024))
	offheap.Free(old)
	for i := range t.len() {
		_, slot := t.find(t.key(i))
		t.index[slot] = uint32(i + 1)
	}
}

// reset drops every entry. The index keeps its size unless it is large:
// the next batch of keys finds it ready, and a burst's is let go.
func (t *keyed[T]) reset() {
	if len(t.index) > 1<<16 {
		offheap.Free(t.index)
		t.index = nil
	} else {
		clear(t.index)
	}
	t.refs.Reset()
	t.vals.Reset()
	t.keys.Reset()
}

// free returns the table's memory to the kernel; it is empty afterwards.
func (t *keyed[T]) free() {
	offheap.Free(t.index)
	t.index = nil
	t.refs.Free()
	t.vals.Free()
	t.keys.Free()
}

// bytes is the memory mapped for the table.
func (t *keyed[T]) bytes() int {
	return 4*len(t.index) + t.refs.Bytes() + t.vals.Bytes() + t.keys.Bytes()
}

// tables are a Headroom's per-subject memory outside the Go heap: a room
// per subject, the bucket copies (mirror.go) chained from the rooms, and a
// write-back owner's pending increments (writeback.go). tables is apart
// from Headroom so that a cleanup can free it once the Headroom is
// collected.
type tables struct {
	rooms   *keyed[room]
	blocks  offheap.Array[block]
	pending *pending
}

func newTables() *tables {
	return &tables{rooms: newKeyed[room](), pending: &pending{subs: newKeyed[dirty](), ids: newKeyed[int64]()}}
}

func (t *tables) free() {
	t.rooms.free()
	t.blocks.Free()
	t.pending.free()
}

func (t *tables) reset() {
	t.rooms.reset()
	t.blocks.Reset()
}

func (t *tables) bytes() int {
	return t.rooms.bytes() + t.blocks.Bytes() + t.pending.subs.bytes() + t.pending.sums.Bytes() + t.pending.ids.bytes()
}

// fieldKey is window.Field(sub) built in buf, without allocating.
func fieldKey(buf []byte, sub window.Subject) []byte {
	return append(append(append(append(append(buf[:0], sub.Action...), ':'), sub.Kind...), ':'), sub.Subject...)
}
