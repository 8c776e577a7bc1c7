package offheap

import (
	"math/bits"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"
)

// mapped records the memory Make mapped, so that Free unmaps only that
// (a fallback allocation on the heap is left to the collector).
var (
	mu        sync.Mutex
	mapped    = map[unsafe.Pointer]int{}
	bytesNow  atomic.Int64
	fallbacks atomic.Int64
	// unmapErrors: munmap fails only for a range that was not mapped, a
	// bug here; the memory stays mapped (counted in Mapped) and is lost.
	unmapErrors atomic.Int64
)

// Make returns n zeroed values of T outside the Go heap; Free returns them.
// T must hold no pointers (Make panics otherwise: a Go pointer stored
// there would not keep what it points to alive). When the kernel refuses
// the mapping (out of address space, over vm.max_map_count), the values
// come from the Go heap instead: Fallbacks counts those.
func Make[T any](n int) []T {
	if n == 0 {
		return nil
	}
	size := int(unsafe.Sizeof(*new(T)))
	mustBePointerFree(reflect.TypeFor[T]())
	b, err := mapBytes(n * size)
	if err != nil {
		fallbacks.Add(1)
		return make([]T, n)
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	mu.Lock()
	mapped[p] = len(b)
	mu.Unlock()
	bytesNow.Add(int64(len(b)))
	return unsafe.Slice((*T)(p), n)
}

// Free returns what Make allocated. s must not be used afterwards.
func Free[T any](s []T) {
	if cap(s) == 0 {
		return
	}
	p := unsafe.Pointer(unsafe.SliceData(s))
	mu.Lock()
	n, ok := mapped[p]
	delete(mapped, p)
	mu.Unlock()
	if !ok {
		return
	}
	if err := unmapBytes(unsafe.Slice((*byte)(p), n)); err != nil {
		unmapErrors.Add(1)
		return
	}
	bytesNow.Add(-int64(n))
}

// UnmapErrors is how many Frees the kernel refused: their memory leaked.
func UnmapErrors() int64 { return unmapErrors.Load() }

// Mapped is the memory the process holds mapped through Make: its RSS
// outside the Go heap is at most this (pages never touched cost none).
func Mapped() int64 { return bytesNow.Load() }

// Fallbacks is how many allocations came from the Go heap because the
// kernel refused to map memory.
func Fallbacks() int64 { return fallbacks.Load() }

func mustBePointerFree(t reflect.Type) {
	if !pointerFree(t) {
		panic("offheap: " + t.String() + " holds pointers")
	}
}

func pointerFree(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	case reflect.Array:
		return t.Len() == 0 || pointerFree(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !pointerFree(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}

// chunkBytes is the size of one mapping of an Array or Arena: large enough
// that maps are few (the kernel caps them per process, 65 530 by default),
// and the part of a chunk not used yet costs address space, not RSS.
const chunkBytes = 1 << 20

// Array is a growable array of T outside the Go heap, in chunks that never
// move: a pointer from At stays valid until Reset or Free. The zero value
// is an empty array.
type Array[T any] struct {
	chunks [][]T
	// per is the values per chunk, a power of two (1 << shift): At's
	// division by it was half the time of an evaluation from the bucket
	// copies.
	per   int
	shift uint
	n     int
}

// Len is the number of values appended since the last Reset.
func (a *Array[T]) Len() int { return a.n }

// At returns the i-th value; i must be below Len.
func (a *Array[T]) At(i int) *T { return &a.chunks[i>>a.shift][i&(a.per-1)] }

// Append adds a zero value and returns its index.
func (a *Array[T]) Append() int {
	if a.per == 0 {
		a.shift = uint(bits.Len(uint(max(chunkBytes/int(unsafe.Sizeof(*new(T))), 1))) - 1)
		a.per = 1 << a.shift
	}
	c := a.n >> a.shift
	if c == len(a.chunks) {
		a.chunks = append(a.chunks, Make[T](a.per))
	}
	a.n++ // fresh chunks are zero: Reset returns them all
	return a.n - 1
}

// Reset empties the array and returns its memory to the kernel: a table
// emptied after a burst does not keep the burst's RSS. It stays usable.
func (a *Array[T]) Reset() {
	for i := range a.chunks {
		Free(a.chunks[i])
		a.chunks[i] = nil
	}
	a.chunks = a.chunks[:0]
	a.n = 0
}

// Free is Reset: the array holds nothing afterwards.
func (a *Array[T]) Free() { a.Reset() }

// Bytes is the memory mapped for the array.
func (a *Array[T]) Bytes() int { return len(a.chunks) * a.per * int(unsafe.Sizeof(*new(T))) }

// Arena holds byte strings of at most MaxString bytes outside the Go heap,
// each named by a 32-bit offset. The zero value is an empty arena.
type Arena struct {
	chunks [][]byte
	used   int // bytes used of the last chunk
}

// MaxString is the longest string an Arena holds.
const MaxString = chunkBytes

// Add copies b into the arena and returns its offset, false when b is
// longer than MaxString or the arena holds 4 GiB already.
func (a *Arena) Add(b []byte) (uint32, bool) {
	if len(b) > MaxString {
		return 0, false
	}
	if len(a.chunks) == 0 || a.used+len(b) > chunkBytes {
		if len(a.chunks) >= 1<<32/chunkBytes {
			return 0, false
		}
		a.chunks = append(a.chunks, Make[byte](chunkBytes))
		a.used = 0
	}
	off := uint32((len(a.chunks)-1)*chunkBytes + a.used)
	a.used += copy(a.chunks[len(a.chunks)-1][a.used:], b)
	return off, true
}

// Get returns the n bytes at off, as Add stored them. The slice aliases
// the arena: valid until Reset or Free.
func (a *Arena) Get(off uint32, n int) []byte {
	c, i := int(off)/chunkBytes, int(off)%chunkBytes
	return a.chunks[c][i : i+n]
}

// Reset empties the arena and returns its memory to the kernel.
func (a *Arena) Reset() {
	for i := range a.chunks {
		Free(a.chunks[i])
		a.chunks[i] = nil
	}
	a.chunks = a.chunks[:0]
	a.used = 0
}

// Free is Reset: the arena holds nothing afterwards.
func (a *Arena) Free() { a.Reset() }

// Bytes is the memory mapped for the arena.
func (a *Arena) Bytes() int { return len(a.chunks) * chunkBytes }
