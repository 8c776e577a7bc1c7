package consume

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/segmentio/kafka-go/compress"
)

// The Fetcher reads v2 record batches (every batch a Kafka 3 broker
// stores) itself rather than with kafka-go's decoder, which builds an index
// of every record and header of a batch before the first is read: 64 to
// 160 bytes per record of a few bytes, so that a batch of 8 MiB of empty
// records or headers took 100 to 180 MiB while it was read, however few of
// its records a fetch then kept. Here a batch costs its bytes inflated
// once, and what the fetch keeps of it. Older message formats (v0, v1)
// still go through kafka-go's decoder (decodeBatch).

// Offsets of a v2 batch's header fields, from the batch's first byte (its
// base offset); records start at v2Header.
const (
	v2Magic           = 16
	v2CRC             = 17
	v2Attributes      = 21
	v2LastOffsetDelta = 23
	v2FirstTimestamp  = 27
	v2Count           = 57
	v2Header          = 61
)

// v2 batch attributes.
const (
	attrCompression = 0x07
	attrControl     = 0x20
)

// MaxRecordHeaders is the most headers a record may carry. floodgate's
// events carry one or two; a record of millions of empty headers (two
// bytes each) would cost forty bytes each once read. A record past it is
// not read: the Fetcher reports it as an *UnreadableError, as a batch past
// MaxBatchDecompressed.
const MaxRecordHeaders = 64

// ErrTooManyHeaders is the error of a record with more than
// MaxRecordHeaders headers.
var ErrTooManyHeaders = fmt.Errorf("floodgate: record holds more than %d headers", MaxRecordHeaders)

var errCorruptBatch = errors.New("corrupt record batch")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// v2Batch is a v2 record batch being read: its header, and its records as
// bytes, inflated.
type v2Batch struct {
	base           int64
	firstTimestamp int64
	control        bool
	left           int32 // records not read yet
	data           []byte
	// inflated is the pooled memory data was inflated into, nil for an
	// uncompressed batch: handed back by done.
	inflated *[]byte
}

// inflatedBufs are the buffers batches are inflated into, shared by every
// partition: one per batch being read, each inflateCap long, so that none
// grows (a growing buffer is two or three at once). A buffer's pages
// count in RSS only once written: a batch of a few KB costs a few KB.
var inflatedBufs sync.Pool

// inflateCap is an inflated batch's bound and room for the codecs to
// overshoot it by a block before they notice.
const inflateCap = MaxBatchDecompressed + 256<<10

// openV2 checks raw's CRC and inflates its records (at most
// MaxBatchDecompressed bytes: past them, ErrDecompressionLimit).
func openV2(raw []byte) (*v2Batch, error) {
	if len(raw) < v2Header {
		return nil, fmt.Errorf("%w: %d bytes, shorter than its header", errCorruptBatch, len(raw))
	}
	if sum, want := crc32.Checksum(raw[v2Attributes:], castagnoli), binary.BigEndian.Uint32(raw[v2CRC:]); sum != want {
		return nil, fmt.Errorf("%w: crc32c %08x, header says %08x", errCorruptBatch, sum, want)
	}
	attrs := binary.BigEndian.Uint16(raw[v2Attributes:])
	b := &v2Batch{
		base:           int64(binary.BigEndian.Uint64(raw)),
		firstTimestamp: int64(binary.BigEndian.Uint64(raw[v2FirstTimestamp:])),
		control:        attrs&attrControl != 0,
		left:           int32(binary.BigEndian.Uint32(raw[v2Count:])),
		data:           raw[v2Header:],
	}
	if c := compress.Compression(attrs & attrCompression); c != 0 {
		if err := b.inflate(c); err != nil {
			b.done()
			return nil, err
		}
	}
	return b, nil
}

// zstdDecoder decompresses zstd batches whole (DecodeAll), within
// MaxBatchDecompressed. kafka-go's zstd reader streams, and a streaming
// zstd decoder allocates the window a frame declares before its first
// block: a frame of 21 bytes declaring 128 MiB, which the broker accepts,
// cost 128 MiB, kept afterwards by the decoder's pool. Decoding whole into
// the batch's own buffer needs no window beside it; frames declaring a
// window over the bound are refused (zstd levels 20 to 22 of a producer
// that does not state the batch's size).
var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxBatchDecompressed))
})

// inflate replaces b.data by what it decompresses to with codec c.
func (b *v2Batch) inflate(c compress.Compression) error {
	b.inflated, _ = inflatedBufs.Get().(*[]byte)
	if b.inflated == nil || cap(*b.inflated) < inflateCap {
		buf := make([]byte, 0, inflateCap)
		b.inflated = &buf
	}
	switch c {
	case compress.Zstd:
		return b.inflateZstd()
	case compress.Snappy:
		return b.inflateSnappy()
	}
	codec := c.Codec()
	if codec == nil {
		return fmt.Errorf("%w: unsupported compression %d", errCorruptBatch, c)
	}
	return b.inflateStream(codec)
}

// inflateZstd decompresses a zstd batch whole (see zstdDecoder).
func (b *v2Batch) inflateZstd() error {
	d, err := zstdDecoder()
	if err != nil {
		return fmt.Errorf("zstd decoder: %w", err)
	}
	out, err := d.DecodeAll(b.data, (*b.inflated)[:0])
	if out != nil {
		*b.inflated = out
	}
	switch {
	case errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded):
		return fmt.Errorf("%w (%d bytes): %v", ErrDecompressionLimit, MaxBatchDecompressed, err)
	case err != nil:
		return fmt.Errorf("%w: zstd: %v", errCorruptBatch, err)
	}
	b.data = out
	return nil
}

// xerialMagic starts a snappy batch in the framing of the Java client
// (xerial snappy-java): a 16-byte header, then blocks each after its
// length (int32).
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// inflateSnappy decompresses a snappy batch block by block, each after
// checking the size its header states against what is left of the bound:
// kafka-go's snappy reader inflates a block whole before handing any of
// it over, and a block of a batch's megabyte can state thirty times that.
func (b *v2Batch) inflateSnappy() error {
	in, out := b.data, (*b.inflated)[:0]
	defer func() { *b.inflated = out }()
	block := func(src []byte) error {
		n, err := snappy.DecodedLen(src)
		if err != nil {
			return fmt.Errorf("%w: snappy: %v", errCorruptBatch, err)
		}
		if len(out)+n > MaxBatchDecompressed {
			return fmt.Errorf("%w (%d bytes)", ErrDecompressionLimit, MaxBatchDecompressed)
		}
		out = slices.Grow(out, n)
		dec, err := snappy.Decode(out[len(out):len(out)+n], src)
		if err != nil {
			return fmt.Errorf("%w: snappy: %v", errCorruptBatch, err)
		}
		out = out[:len(out)+len(dec)]
		return nil
	}
	if len(in) < 16 || !bytes.Equal(in[:8], xerialMagic) {
		if err := block(in); err != nil {
			return err
		}
		b.data = out
		return nil
	}
	for in = in[16:]; len(in) > 0; {
		if len(in) < 4 || int64(binary.BigEndian.Uint32(in)) > int64(len(in)-4) {
			return fmt.Errorf("%w: snappy block cut short", errCorruptBatch)
		}
		n := int(binary.BigEndian.Uint32(in))
		if err := block(in[4 : 4+n]); err != nil {
			return err
		}
		in = in[4+n:]
	}
	b.data = out
	return nil
}

// inflateStream replaces b.data by what codec's reader decompresses it
// to.
func (b *v2Batch) inflateStream(codec compress.Codec) error {
	zr := codec.NewReader(bytes.NewReader(b.data))
	defer zr.Close()
	// Reading one byte past the bound proves a batch over it.
	const limit = MaxBatchDecompressed + 1
	out := (*b.inflated)[:0]
	defer func() { *b.inflated = out }()
	for {
		if len(out) == cap(out) {
			if len(out) >= limit {
				return fmt.Errorf("%w (%d bytes)", ErrDecompressionLimit, MaxBatchDecompressed)
			}
			out = slices.Grow(out, min(max(cap(out), 4*len(b.data), 64<<10), limit-len(out)))
		}
		n, err := zr.Read(out[len(out):min(cap(out), limit)])
		out = out[:len(out)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if len(out) > MaxBatchDecompressed {
		return fmt.Errorf("%w (%d bytes)", ErrDecompressionLimit, MaxBatchDecompressed)
	}
	b.data = out
	return nil
}

// done hands the inflated memory back; nothing of b may be used after.
func (b *v2Batch) done() {
	if b.inflated != nil {
		inflatedBufs.Put(b.inflated)
		b.inflated, b.data = nil, nil
	}
}

// v2Record is one record of a v2 batch; its slices point into the batch.
type v2Record struct {
	offset     int64
	timestamp  int64 // Unix milliseconds
	key, value []byte
	nheaders   int
	headers    []byte // nheaders headers, as the batch holds them
}

// next reads the batch's next record; io.EOF after the last.
func (b *v2Batch) next() (v2Record, error) {
	var r v2Record
	if b.left <= 0 || len(b.data) == 0 {
		// A batch that ends before its count: what it holds is read, as
		// kafka-go reads it.
		return r, io.EOF
	}
	b.left--
	length, n := binary.Varint(b.data)
	if n <= 0 || length < 0 || length > int64(len(b.data)-n) {
		return r, fmt.Errorf("%w: record length", errCorruptBatch)
	}
	rec := recordReader{b: b.data[n : n+int(length)]}
	b.data = b.data[n+int(length):]
	rec.skip(1) // attributes
	r.timestamp = b.firstTimestamp + rec.varint()
	r.offset = b.base + rec.varint()
	r.key = rec.varbytes()
	r.value = rec.varbytes()
	nh := rec.varint()
	if rec.err != nil || nh < 0 {
		return r, fmt.Errorf("%w: record at offset %d", errCorruptBatch, r.offset)
	}
	if nh > MaxRecordHeaders {
		return r, fmt.Errorf("%w: %d at offset %d", ErrTooManyHeaders, nh, r.offset)
	}
	r.nheaders, r.headers = int(nh), rec.b
	return r, nil
}

// nextHeader reads the next of a record's headers off hs; value is nil
// for a null one (a null key reads as empty, as kafka-go reads it).
func nextHeader(hs *[]byte) (key, value []byte, err error) {
	rec := recordReader{b: *hs}
	key = rec.varbytes()
	value = rec.varbytes()
	*hs = rec.b
	if rec.err != nil {
		return nil, nil, fmt.Errorf("%w: record header", errCorruptBatch)
	}
	return key, value, nil
}

// recordReader reads a record's varint-framed fields; the first field
// that runs past the record is kept in err, and every read after it
// returns zero.
type recordReader struct {
	b   []byte
	err error
}

func (r *recordReader) skip(n int) {
	if r.err == nil && n > len(r.b) {
		r.err = errCorruptBatch
	}
	if r.err != nil {
		return
	}
	r.b = r.b[n:]
}

func (r *recordReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errCorruptBatch
		return 0
	}
	r.b = r.b[n:]
	return v
}

// varbytes reads a length-prefixed field: nil for length -1.
func (r *recordReader) varbytes() []byte {
	n := r.varint()
	if r.err != nil || n < 0 {
		return nil
	}
	if n > int64(len(r.b)) {
		r.err = errCorruptBatch
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}
