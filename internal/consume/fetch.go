package consume

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
	"unsafe"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// LostOffsetsError says that a partition cannot be read from the offset a
// sink stands at: the log no longer holds it. Either retention deleted
// records nobody had counted (From < To: the offsets [From, To) are gone), or
// the topic was deleted and recreated and the stored offset lies beyond the
// new log's end (Beyond: nothing is known of what was lost; the new log
// starts at To).
type LostOffsetsError struct {
	Topic     string
	Partition int
	From, To  int64
	Beyond    bool
}

func (e *LostOffsetsError) Error() string {
	if e.Beyond {
		return fmt.Sprintf("topic %s partition %d: offset %d is beyond the log's end %d (topic recreated?)", e.Topic, e.Partition, e.From, e.To)
	}
	return fmt.Sprintf("topic %s partition %d: offsets %d..%d were deleted before they were read (retention)", e.Topic, e.Partition, e.From, e.To-1)
}

// Lost is the number of offsets known to be gone (0 when Beyond).
func (e *LostOffsetsError) Lost() int64 {
	if e.Beyond {
		return 0
	}
	return e.To - e.From
}

// Fetcher reads one partition with fetch requests sent straight to its
// leader through a kafka.Client's transport: each request returns what the
// log holds from the next offset on, at once when there is something, else
// after a long poll. Unlike kafka.Reader, it never skips: an offset the log
// no longer holds is a *LostOffsetsError for the caller to decide on, and a
// record batch that decompresses past MaxBatchDecompressed (or a record of
// more than MaxRecordHeaders headers) an *UnreadableError naming its
// offsets. Records of open transactions are not read (read_committed);
// transaction markers are skipped.
//
// A response's batches are decompressed one at a time, and a fetch stops
// before the record that would take its records past
// FetcherConfig.MaxHeldBytes: the next one reads on from there. However
// many batches a response holds, and whatever they inflate to, a fetch
// holds at most that budget (or its one record, when larger), and one
// batch inflated while it is read (see rawfetch.go and batch.go). Not safe
// for concurrent use.
type Fetcher struct {
	client    *kafka.Client
	transport kafka.RoundTripper
	clientID  string
	topic     string
	partition int
	maxBytes  int64
	maxHeld   int64
	// ask is the size of the next request (see sized).
	ask     int64
	maxWait time.Duration
	next    int64
	// HighWatermark of the last response: where the log ends.
	HighWatermark int64
	// Markers counts the transaction markers read past.
	Markers int64
	// Cuts counts the fetches that stopped at MaxHeldBytes before the end
	// of their response.
	Cuts int64
	// hint is the number of records the last response held: the next
	// one's slice starts that large instead of growing by copies. used is
	// the bytes its arena handed out: the next one's first chunk.
	hint, used int
	// held is the memory the last response's records hold: the chunks
	// their keys, values and header values were cut from, their headers,
	// and their slice (what Config.ReadAheadBytes counts). inflated is
	// what its batches decompressed to.
	held, inflated int64
	// resp is the last response as it came, reused by the next request.
	resp []byte
}

// FetcherConfig configures a Fetcher.
type FetcherConfig struct {
	Client    *kafka.Client // required
	Topic     string        // required
	Partition int
	// Offset to read from; kafka.FirstOffset reads from the log's start.
	Offset int64
	// MaxBytes of one fetch response, compressed, as the broker counts
	// it (it sends a first batch larger than that whole). Default 1 MiB.
	MaxBytes int64
	// MaxHeldBytes bounds what one fetch's records hold once decompressed
	// and copied: their keys, values and headers and the records
	// themselves (never less than the bytes they were decompressed from).
	// A fetch stops before the record that would pass it; the next one
	// reads on from that record, so nothing is skipped. A fetch always
	// reads at least one record, however large. Default 16 MiB.
	MaxHeldBytes int64
	// MaxWait of a fetch when the partition has nothing new. Default 500ms.
	MaxWait time.Duration
}

// DefaultMaxHeldBytes is FetcherConfig.MaxHeldBytes's default.
const DefaultMaxHeldBytes = 16 << 20

// NewFetcher returns a Fetcher at cfg.Offset.
func NewFetcher(cfg FetcherConfig) (*Fetcher, error) {
	if cfg.Client == nil || cfg.Topic == "" {
		return nil, errors.New("fetcher: client and topic are required")
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 1 << 20
	}
	if cfg.MaxHeldBytes <= 0 {
		cfg.MaxHeldBytes = DefaultMaxHeldBytes
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 500 * time.Millisecond
	}
	transport := cfg.Client.Transport
	if transport == nil {
		transport = kafka.DefaultTransport
	}
	clientID := "floodgate"
	if t, ok := transport.(*kafka.Transport); ok && t.ClientID != "" {
		clientID = t.ClientID
	}
	return &Fetcher{client: cfg.Client, transport: transport, clientID: clientID, topic: cfg.Topic, partition: cfg.Partition,
		maxBytes: cfg.MaxBytes, ask: cfg.MaxBytes, maxHeld: cfg.MaxHeldBytes, maxWait: cfg.MaxWait, next: cfg.Offset}, nil
}

// Next is the offset the next Fetch reads from.
func (f *Fetcher) Next() int64 { return f.next }

// SetOffset moves the next offset.
func (f *Fetcher) SetOffset(offset int64) { f.next = offset }

// Held is what the records the last Fetch returned hold in memory: the
// figure MaxHeldBytes bounds (but for a fetch of one larger record).
func (f *Fetcher) Held() int64 { return f.held }

// Inflated is what the record batches the last Fetch read decompressed
// to (their bytes as they came when not compressed). Each batch is
// decompressed, read and let go before the next one: this is what the
// fetch cost, not what it held at once.
func (f *Fetcher) Inflated() int64 { return f.inflated }

// Fetch returns the next records (none after a long poll on an idle
// partition) and advances past them and past the transaction markers among
// and after them, which hold no event: Next then tells how far the log was
// read. A *LostOffsetsError leaves the position where it was; an
// *UnreadableError moves it past the batch it names.
func (f *Fetcher) Fetch(ctx context.Context) ([]kafka.Message, error) {
	buf, err := f.fetch(ctx)
	if buf == nil {
		return nil, err
	}
	return buf.msgs, err
}

// fetch is Fetch, returning the memory the records were read into, for a
// caller that hands it back (buffer.recycle) once done with them.
func (f *Fetcher) fetch(ctx context.Context) (*buffer, error) {
	if f.next < 0 {
		first, _, err := f.Bounds(ctx)
		if err != nil {
			return nil, err
		}
		f.next = first
	}
	res, err := f.exchange(ctx, f.next, f.ask, f.maxWait)
	if err != nil {
		return nil, fmt.Errorf("fetch topic %s partition %d offset %d: %w", f.topic, f.partition, f.next, err)
	}
	if res.err != nil {
		if errors.Is(res.err, kafka.OffsetOutOfRange) {
			return nil, f.outOfRange(ctx)
		}
		return nil, fmt.Errorf("fetch topic %s partition %d offset %d: %w", f.topic, f.partition, f.next, res.err)
	}
	f.HighWatermark = res.highWatermark
	buf, next, err := f.read(res.records)
	var unreadable *UnreadableError
	switch {
	case errors.As(err, &unreadable):
		buf.recycle()
		f.next = unreadable.To
		return nil, err
	case err != nil:
		buf.recycle()
		return nil, fmt.Errorf("read records topic %s partition %d offset %d: %w", f.topic, f.partition, f.next, err)
	}
	f.next = next
	return buf, nil
}

// minAsk is the least a request asks for after a cut one.
const minAsk = 64 << 10

// sized sets the size of the next request: after a fetch cut by the budget,
// what it read of its response (a partition whose records inflate past the
// budget is not sent what it would drop, to fetch again), else back up
// towards MaxBytes.
func (f *Fetcher) sized(cut bool, read int) {
	if cut {
		f.ask = min(max(int64(read), minAsk), f.maxBytes)
		return
	}
	f.ask = min(2*f.ask, f.maxBytes)
}

// UnreadableError reports offsets [From, To) of a partition that the
// Fetcher moved past without reading them: their batch decompresses to more
// than MaxBatchDecompressed (its zstd frame declares a larger window), or
// the record at To-1 holds more than MaxRecordHeaders headers. Fetch
// returns it once; the next Fetch reads from To.
type UnreadableError struct {
	Topic     string
	Partition int
	From, To  int64
	Err       error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("topic %s partition %d: offsets %d..%d skipped: %v", e.Topic, e.Partition, e.From, e.To-1, e.Err)
}

func (e *UnreadableError) Unwrap() error { return e.Err }

// read decodes a response's record batches one at a time, in order: the
// records of data batches, and the offsets of control batches (transaction
// markers), so that the position moves past markers too. It stops before a
// record that would take the records read past f.maxHeld, and before a batch or
// record it cannot read once it has read something; one it cannot read
// first is the fetch's error (an *UnreadableError past the decompression
// or header bound, naming the offsets). It returns the offset after the
// last record or marker read.
func (f *Fetcher) read(records []byte) (*buffer, int64, error) {
	buf := buffers.Get().(*buffer)
	// A recycled slice is used whatever its size: one that grows is handed
	// back grown, so the buffers settle at the largest responses' size.
	rd := reading{f: f, next: f.next, msgs: buf.msgs[:0], mem: arena{first: f.used, spare: buf.chunks}}
	if rd.msgs == nil {
		rd.msgs = make([]kafka.Message, 0, f.hint)
	}
	defer func() {
		f.sized(rd.cut, rd.read)
		if rd.cut {
			f.Cuts++
		}
		f.hint, f.used, f.inflated = len(rd.msgs), rd.mem.used, rd.inflated
		f.held = rd.mem.alloc + int64(cap(rd.msgs))*messageSize + rd.headers
		buf.msgs, buf.chunks = rd.msgs, append(rd.mem.chunks, rd.mem.spare...)
	}()
	for rest := records; len(rest) > 0; {
		raw, last, ok := nextBatch(&rest)
		if !ok {
			break // a batch cut short at the response's end: read whole by the next fetch
		}
		if last < rd.next {
			continue // batches may start before the offset asked for
		}
		if rd.full() {
			rd.cut = true
			break
		}
		rd.read = len(records) - len(rest)
		var more bool
		var err error
		if len(raw) > v2Magic && raw[v2Magic] == 2 {
			more, err = rd.v2(raw, last)
		} else {
			more, err = rd.legacy(raw, last)
		}
		if err != nil {
			return buf, rd.next, err
		}
		if !more {
			break
		}
	}
	return buf, rd.next, nil
}

// reading is one response being read.
type reading struct {
	f    *Fetcher
	next int64 // the offset after the last record or marker read
	msgs []kafka.Message
	mem  arena
	// headers is what the records' headers hold outside the arena;
	// inflated the bytes the batches read decompressed to.
	headers, inflated int64
	// cut tells that the budget ended the fetch; read is how far into the
	// response it read (up to the end of the last batch it opened).
	cut  bool
	read int
}

// holding is what the records read hold. It counts the slice by its
// length: a recycled slice may be longer than this fetch needs.
func (rd *reading) holding() int64 {
	return rd.mem.alloc + int64(len(rd.msgs))*messageSize + rd.headers
}

// full tells whether the records read hold the budget.
func (rd *reading) full() bool { return len(rd.msgs) > 0 && rd.holding() >= rd.f.maxHeld }

// fits tells whether a record whose key, value and headers hold n bytes
// may join the records read without passing the budget; the first always
// does.
func (rd *reading) fits(n int64) bool {
	return len(rd.msgs) == 0 || rd.holding()+messageSize+n <= rd.f.maxHeld
}

func (rd *reading) progress() bool { return len(rd.msgs) > 0 || rd.next > rd.f.next }

// failed decides what a batch or record that cannot be read does to the
// fetch, the offsets [rd.next, to) being what it spans: with records read
// before it, the fetch ends there (the next one meets it first); else an
// unreadable one is skipped, reported as an *UnreadableError, and anything
// else is the fetch's error. It reports whether the fetch goes on (never).
func (rd *reading) failed(err error, to int64) (bool, error) {
	switch {
	case rd.progress():
		return false, nil
	case errors.Is(err, ErrDecompressionLimit) || errors.Is(err, ErrTooManyHeaders):
		return false, &UnreadableError{Topic: rd.f.topic, Partition: rd.f.partition, From: rd.next, To: to, Err: err}
	default:
		return false, err
	}
}

// v2 reads a v2 batch ending at offset last; false ends the fetch.
func (rd *reading) v2(raw []byte, last int64) (bool, error) {
	b, err := openV2(raw)
	if err != nil {
		return rd.failed(err, last+1)
	}
	defer b.done()
	rd.inflated += int64(len(b.data))
	for {
		r, err := b.next()
		switch {
		case errors.Is(err, io.EOF):
			return true, nil
		case errors.Is(err, ErrTooManyHeaders) && r.offset < rd.next:
			continue // read past before
		case err != nil:
			// A record not read alone: the batch reads on after it.
			return rd.failed(err, r.offset+1)
		case r.offset < rd.next:
			continue
		case b.control:
			rd.next = r.offset + 1
			rd.f.Markers++
			continue
		case !rd.fits(int64(len(r.key)+len(r.value)+len(r.headers)) + int64(r.nheaders)*headerSize):
			rd.cut = true
			return false, nil
		}
		m, held, err := messageV2(rd.f.topic, rd.f.partition, &r, &rd.mem)
		if err != nil {
			return rd.failed(err, last+1)
		}
		rd.add(m, held, r.offset)
	}
}

// legacy reads a v0 or v1 message set ending at offset last with kafka-go's
// decoder; false ends the fetch.
func (rd *reading) legacy(raw []byte, last int64) (bool, error) {
	b, err := decodeBatch(raw)
	if err != nil {
		return rd.failed(err, last+1)
	}
	for {
		r, err := b.ReadRecord()
		switch {
		case errors.Is(err, io.EOF):
			return true, nil
		case err != nil:
			return rd.failed(err, last+1)
		case r.Offset < rd.next:
			release(r)
			continue
		case !rd.fits(int64(bytesLen(r.Key) + bytesLen(r.Value))):
			release(r)
			rd.cut = true
			return false, nil
		}
		m, err := message(rd.f.topic, rd.f.partition, r, &rd.mem)
		release(r)
		if err != nil {
			return rd.failed(err, last+1)
		}
		rd.inflated += int64(len(m.Key) + len(m.Value))
		rd.add(m, 0, r.Offset)
	}
}

func bytesLen(b kafka.Bytes) int {
	if b == nil {
		return 0
	}
	return b.Len()
}

// add keeps m, read at offset, whose headers hold held outside the arena.
func (rd *reading) add(m kafka.Message, held int64, offset int64) {
	rd.msgs = append(rd.msgs, m)
	rd.headers += held
	rd.next = offset + 1
}

// batchPrefix is what every record batch (and v0/v1 message) starts with:
// its base offset (int64) and the length of the rest (int32).
const batchPrefix = 12

// nextBatch cuts the next record batch off rest and returns it with its
// last offset, read from its header: a v2 batch's base offset plus its last
// offset delta; a v0 or v1 message's own offset (a compressed one's is its
// last inner message's). It reports false when rest holds no whole batch.
func nextBatch(rest *[]byte) (raw []byte, last int64, ok bool) {
	b := *rest
	if len(b) < batchPrefix {
		return nil, 0, false
	}
	n := int32(binary.BigEndian.Uint32(b[8:batchPrefix]))
	size := int64(n) + batchPrefix
	if n < 0 || size > int64(len(b)) {
		return nil, 0, false
	}
	raw, *rest = b[:size], b[size:]
	last = int64(binary.BigEndian.Uint64(raw))
	if len(raw) >= v2LastOffsetDelta+4 && raw[v2Magic] == 2 {
		last += int64(int32(binary.BigEndian.Uint32(raw[v2LastOffsetDelta:])))
	}
	return raw, last, true
}

// decodeBatch decodes one record batch with kafka-go's decoder, which
// decompresses it whole (within MaxBatchDecompressed) and checks its CRC.
func decodeBatch(raw []byte) (kafka.RecordReader, error) {
	r := batchReader{b: raw}
	binary.BigEndian.PutUint32(r.size[:], uint32(len(raw)))
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(&r); err != nil {
		return nil, err
	}
	switch rr := rs.Records.(type) {
	case nil:
		return kafka.NewRecordReader(), nil
	case *protocol.RecordStream:
		if len(rr.Records) == 1 {
			return rr.Records[0], nil
		}
	}
	return rs.Records, nil
}

// batchReader presents one batch as a record set of its own: its size, then
// its bytes. Bytes lets kafka-go's decoder peek at the batch's magic byte
// without a copy.
type batchReader struct {
	size [4]byte
	read int // of size
	b    []byte
}

func (r *batchReader) Read(p []byte) (int, error) {
	if r.read < len(r.size) {
		n := copy(p, r.size[r.read:])
		r.read += n
		return n, nil
	}
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func (r *batchReader) Bytes() []byte { return r.b }

// outOfRange tells which side of the log f.next fell off.
func (f *Fetcher) outOfRange(ctx context.Context) error {
	first, last, err := f.Bounds(ctx)
	if err != nil {
		return err
	}
	switch {
	case f.next < first:
		return &LostOffsetsError{Topic: f.topic, Partition: f.partition, From: f.next, To: first}
	case f.next > last:
		return &LostOffsetsError{Topic: f.topic, Partition: f.partition, From: f.next, To: first, Beyond: true}
	}
	// In range after all (the log moved between the two requests): retry.
	return fmt.Errorf("fetch topic %s partition %d offset %d: out of range, but the log holds %d..%d now", f.topic, f.partition, f.next, first, last)
}

// Bounds returns the first offset the log holds and its end (the last
// stable offset: what read_committed readers can reach).
func (f *Fetcher) Bounds(ctx context.Context) (first, end int64, err error) {
	res, err := f.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics:         map[string][]kafka.OffsetRequest{f.topic: {kafka.FirstOffsetOf(f.partition), kafka.LastOffsetOf(f.partition)}},
		IsolationLevel: kafka.ReadCommitted,
	})
	if err != nil {
		return 0, 0, fmt.Errorf("list offsets topic %s partition %d: %w", f.topic, f.partition, err)
	}
	for _, p := range res.Topics[f.topic] {
		if p.Partition != f.partition {
			continue
		}
		if p.Error != nil {
			return 0, 0, fmt.Errorf("list offsets topic %s partition %d: %w", f.topic, f.partition, p.Error)
		}
		return p.FirstOffset, p.LastOffset, nil
	}
	return 0, 0, fmt.Errorf("list offsets topic %s partition %d: not in the answer", f.topic, f.partition)
}

func message(topic string, partition int, r *kafka.Record, mem *arena) (kafka.Message, error) {
	key, err := mem.read(r.Key)
	if err != nil {
		return kafka.Message{}, err
	}
	value, err := mem.read(r.Value)
	if err != nil {
		return kafka.Message{}, err
	}
	// Header values may point into the response's buffers, reused once it
	// is closed.
	var hs []kafka.Header
	if len(r.Headers) > 0 {
		hs = make([]kafka.Header, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = kafka.Header{Key: h.Key, Value: mem.copy(h.Value)}
		}
	}
	return kafka.Message{Topic: topic, Partition: partition, Offset: r.Offset, Key: key, Value: value, Headers: hs, Time: r.Time}, nil
}

// messageV2 copies r into a kafka.Message, its key, values and header
// values cut from mem. It returns what its headers hold outside mem.
func messageV2(topic string, partition int, r *v2Record, mem *arena) (kafka.Message, int64, error) {
	m := kafka.Message{Topic: topic, Partition: partition, Offset: r.offset,
		Key: mem.copy(r.key), Value: mem.copy(r.value), Time: time.UnixMilli(r.timestamp)}
	if r.nheaders == 0 {
		return m, 0, nil
	}
	m.Headers = make([]kafka.Header, r.nheaders)
	held := int64(r.nheaders) * headerSize
	raw := r.headers
	for i := range m.Headers {
		k, v, err := nextHeader(&raw)
		if err != nil {
			return kafka.Message{}, 0, fmt.Errorf("offset %d: %w", r.offset, err)
		}
		m.Headers[i] = kafka.Header{Key: string(k), Value: mem.copy(v)}
		held += int64(len(k))
	}
	return m, held, nil
}

// release hands r's key and value back to kafka-go once copied: their
// pages return to its pool. Left open, every response allocated new pages,
// the aggregator's largest garbage.
func release(r *kafka.Record) {
	if r.Key != nil {
		r.Key.Close()
	}
	if r.Value != nil {
		r.Value.Close()
	}
}

// messageSize is a kafka.Message's own fields, beside what they point to;
// headerSize a kafka.Header's.
const (
	messageSize = int64(unsafe.Sizeof(kafka.Message{}))
	headerSize  = int64(unsafe.Sizeof(kafka.Header{}))
)

// arenaChunk is the size of the chunks an arena hands slices out of; the
// first is the size the last response needed (at least arenaMin), so that a
// partition fetched a record at a time does not allocate 64 KiB for each.
const (
	arenaChunk = 64 << 10
	arenaMin   = 512
)

// arena holds one response's keys, values and header values in a few
// chunks instead of an allocation each: two or three per record were most
// of the aggregator's garbage. A chunk lives while any record cut from it
// does, which the read-ahead bound already counts. Each slice is capped at
// its length, so that an append by its user copies instead of writing into
// its neighbour.
type arena struct {
	buf   []byte
	first int   // size of the first chunk, if below arenaChunk
	used  int   // bytes handed out
	alloc int64 // bytes of the chunks cut from: what the slices keep alive
	// spare are a recycled response's chunks, cut from before allocating;
	// chunks are those cut from, which the response's buffer keeps.
	spare, chunks [][]byte
}

func (a *arena) take(n int) []byte {
	a.used += n
	if n > arenaChunk/4 {
		a.alloc += int64(n)
		return make([]byte, n)
	}
	if cap(a.buf)-len(a.buf) < n {
		a.buf = a.chunk(n)
		a.chunks = append(a.chunks, a.buf)
		a.alloc += int64(cap(a.buf))
	}
	at := len(a.buf)
	a.buf = a.buf[:at+n]
	return a.buf[at : at+n : at+n]
}

// chunk returns an empty chunk with room for n: a spare one, else a new one.
func (a *arena) chunk(n int) []byte {
	for len(a.spare) > 0 {
		c := a.spare[len(a.spare)-1]
		a.spare = a.spare[:len(a.spare)-1]
		if cap(c) >= n {
			return c[:0]
		}
		// Too small for n, and the last response's own first chunk at most:
		// left to the collector.
	}
	size := arenaChunk
	if len(a.chunks) == 0 && a.first < arenaChunk {
		size = max(a.first, n, arenaMin)
	}
	return make([]byte, 0, size)
}

// read reads b whole, as kafka.ReadAll does.
func (a *arena) read(b kafka.Bytes) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	out := a.take(b.Len())
	_, err := io.ReadFull(b, out)
	return out, err
}

func (a *arena) copy(b []byte) []byte {
	if b == nil {
		return nil
	}
	out := a.take(len(b))
	copy(out, b)
	return out
}
