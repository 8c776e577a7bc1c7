package aggregator

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
		out := w.cut(in)
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
