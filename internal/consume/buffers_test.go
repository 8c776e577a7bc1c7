package consume

import (
	"slices"
	"testing"

	"github.com/segmentio/kafka-go"
)

// TestCutSplitsParts: a batch gathered from several fetches (some holding
// only transaction markers) is cut at BatchMax without copying, and the
// carried rest starts where the batch ends, whatever the batch appends.
func TestCutSplitsParts(t *testing.T) {
	msgs := func(offs ...int64) []kafka.Message {
		out := make([]kafka.Message, len(offs))
		for i, o := range offs {
			out[i] = kafka.Message{Offset: o}
		}
		return out
	}
	offsets := func(parts [][]kafka.Message) []int64 {
		var out []int64
		for _, p := range parts {
			for _, m := range p {
				out = append(out, m.Offset)
			}
		}
		return out
	}
	all := []int64{0, 1, 2, 4, 5, 7, 8}
	for max := 1; max <= len(all)+1; max++ {
		w := &worker{g: &Group{cfg: Config{BatchMax: max}}}
		in := fetched{parts: [][]kafka.Message{msgs(0, 1, 2), msgs(), msgs(4, 5), msgs(), msgs(7, 8)}, n: 7, end: 10}
		bufs := make([]*buffer, len(in.parts))
		for i, p := range in.parts {
			bufs[i] = &buffer{msgs: p}
		}
		in.bufs = slices.Clone(bufs)
		out := w.cut(in)
		checkBufs(t, max, out, bufs)
		if w.carry != nil {
			checkBufs(t, max, *w.carry, bufs)
		}
		want := min(max, len(all))
		if out.n != want || !slices.Equal(offsets(out.parts), all[:want]) {
			t.Fatalf("BatchMax %d: batch %v (n %d), want %v", max, offsets(out.parts), out.n, all[:want])
		}
		if want == len(all) {
			if w.carry != nil || out.end != 10 {
				t.Fatalf("BatchMax %d: carried %v, end %d", max, w.carry, out.end)
			}
			continue
		}
		if out.end != all[want-1]+1 {
			t.Fatalf("BatchMax %d: end %d, want %d", max, out.end, all[want-1]+1)
		}
		// An append to the batch's last part must not write over the rest.
		last := len(out.parts) - 1
		out.parts[last] = append(out.parts[last], kafka.Message{Offset: -1})
		rest := w.carry
		if rest == nil || rest.n != len(all)-want || !slices.Equal(offsets(rest.parts), all[want:]) || rest.end != 10 {
			t.Fatalf("BatchMax %d: rest %+v, want offsets %v", max, rest, all[want:])
		}
	}
}

// checkBufs: each part's buffer is the one its records were read into, or
// nil where the part is the head of a response cut in two (the batch with
// its tail hands the buffer back, once).
func checkBufs(t *testing.T, max int, f fetched, all []*buffer) {
	t.Helper()
	if len(f.bufs) != len(f.parts) {
		t.Fatalf("BatchMax %d: %d buffers for %d parts", max, len(f.bufs), len(f.parts))
	}
	for i, p := range f.parts {
		b := f.bufs[i]
		if b == nil {
			if len(p) > 0 && slices.IndexFunc(all, func(b *buffer) bool { return len(b.msgs) > 0 && &b.msgs[len(b.msgs)-1] == &p[len(p)-1] }) >= 0 {
				t.Fatalf("BatchMax %d: part %d (%d records) has no buffer but holds its response's tail", max, i, len(p))
			}
			continue
		}
		if len(p) > 0 && &b.msgs[len(b.msgs)-1] != &p[len(p)-1] {
			t.Fatalf("BatchMax %d: part %d hands back a buffer whose tail is not in it", max, i)
		}
	}
}

// TestArenaReusesChunks: a recycled response's chunks are cut from before
// anything is allocated; one too small for a value is left to the
// collector, and the chunks cut from are what the response keeps.
func TestArenaReusesChunks(t *testing.T) {
	small, big := make([]byte, 5, 16), make([]byte, 7, arenaChunk)
	a := arena{first: 100, spare: [][]byte{small, big}}
	v := a.copy([]byte("0123456789"))
	if &v[0] != &big[:1][0] {
		t.Fatal("value not cut from the spare chunk")
	}
	for range 3 {
		a.take(arenaChunk / 4)
	}
	if len(a.chunks) != 1 {
		t.Fatalf("%d chunks, want the spare one", len(a.chunks))
	}
	a.take(arenaChunk / 4) // no room left in big, and small is too small
	if len(a.spare) != 0 || len(a.chunks) != 2 || cap(a.chunks[1]) != arenaChunk {
		t.Fatalf("spare %d, chunks %d (second %d bytes)", len(a.spare), len(a.chunks), cap(a.chunks[1]))
	}
	if a.alloc != 2*arenaChunk {
		t.Fatalf("alloc %d, want %d", a.alloc, 2*arenaChunk)
	}
}

// TestArenaChunks: a response's first chunk is what the last one needed,
// later ones arenaChunk, large values their own; no slice can grow into its
// neighbour.
func TestArenaChunks(t *testing.T) {
	a := arena{first: 100}
	k := a.take(10)
	if cap(a.buf) != arenaMin {
		t.Fatalf("first chunk %d bytes, want %d", cap(a.buf), arenaMin)
	}
	v := a.copy([]byte("value"))
	k = append(k[:0], "0123456789+"...) // longer than its slice: must copy
	if string(v) != "value" || cap(v) != len(v) {
		t.Fatalf("neighbour overwritten: %q (cap %d)", v, cap(v))
	}
	_ = k
	a.take(arenaMin) // does not fit: a full chunk follows
	if cap(a.buf) != arenaChunk {
		t.Fatalf("second chunk %d bytes, want %d", cap(a.buf), arenaChunk)
	}
	big := a.take(arenaChunk/4 + 1)
	if len(big) != arenaChunk/4+1 || len(a.buf) != arenaMin {
		t.Fatalf("large value cut from the chunk: len %d, chunk used %d", len(big), len(a.buf))
	}
	if want := 10 + 5 + arenaMin + arenaChunk/4 + 1; a.used != want {
		t.Fatalf("used %d, want %d", a.used, want)
	}
}
