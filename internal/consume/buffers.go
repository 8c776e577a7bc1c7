package consume

import (
	"sync"

	"github.com/segmentio/kafka-go"
)

// A partition's fetch loop reads responses, and its apply loop decodes and
// applies their records, at a few MB a second each: allocated anew each
// time, that memory was half of what the live aggregator allocated, and its
// clearing and collection a tenth of its CPU. Once a batch is applied, its
// memory goes back to pools shared by all partitions; the collector empties
// them when they stay unused, so an idle aggregator does not keep its
// busiest moment's memory.

// buffer is one response's memory: its records' slice and the chunks their
// keys, values and header values were cut from. A worker hands it back once
// no batch holds its records any more, and a later response is read into
// it.
type buffer struct {
	msgs   []kafka.Message
	chunks [][]byte
}

// buffers are the buffers handed back.
var buffers = sync.Pool{New: func() any { return new(buffer) }}

// recycle hands b back. Nothing may use its records, or any slice of their
// keys, values or headers, after that: the next response overwrites them.
func (b *buffer) recycle() { buffers.Put(b) }

// records are batches' Records slices handed back once applied (Sink.Apply
// keeps none), each as a *[]Record.
var records sync.Pool

// newRecords returns an empty slice with room for n: a recycled one when
// there is one. One too small is grown by append and handed back grown.
func newRecords(n int) []Record {
	if p, ok := records.Get().(*[]Record); ok {
		return (*p)[:0]
	}
	return make([]Record, 0, n)
}

// recycleRecords hands rs back: nothing may use it, or its events, after.
func recycleRecords(rs []Record) {
	if cap(rs) > 0 {
		records.Put(&rs)
	}
}
