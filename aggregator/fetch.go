package aggregator

import (
	"context"
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
// leader (kafka.Client.Fetch): each request returns what the log holds from
// the next offset on, at once when there is something, else after a long
// poll. Unlike kafka.Reader, it never skips: an offset the log no longer
// holds is a *LostOffsetsError for the caller to decide on. Records of open
// transactions are not read (read_committed); transaction markers are
// skipped. Not safe for concurrent use.
type Fetcher struct {
	client    *kafka.Client
	topic     string
	partition int
	maxBytes  int64
	maxWait   time.Duration
	next      int64
	// HighWatermark of the last response: where the log ends.
	HighWatermark int64
	// Markers counts the transaction markers read past.
	Markers int64
	// hint is the number of records the last response held: the next
	// one's slice starts that large instead of growing by copies. used is
	// the bytes its arena handed out: the next one's first chunk.
	hint, used int
	// held is the memory the last response's records hold: the chunks
	// their keys, values and header values were cut from, and their slice
	// (what Config.ReadAheadBytes counts).
	held int64
}

// FetcherConfig configures a Fetcher.
type FetcherConfig struct {
	Client    *kafka.Client // required
	Topic     string        // required
	Partition int
	// Offset to read from; kafka.FirstOffset reads from the log's start.
	Offset int64
	// MaxBytes of one fetch response. Default 1 MiB.
	MaxBytes int64
	// MaxWait of a fetch when the partition has nothing new. Default 500ms.
	MaxWait time.Duration
}

// NewFetcher returns a Fetcher at cfg.Offset.
func NewFetcher(cfg FetcherConfig) (*Fetcher, error) {
	if cfg.Client == nil || cfg.Topic == "" {
		return nil, errors.New("fetcher: client and topic are required")
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 1 << 20
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 500 * time.Millisecond
	}
	return &Fetcher{client: cfg.Client, topic: cfg.Topic, partition: cfg.Partition, maxBytes: cfg.MaxBytes, maxWait: cfg.MaxWait, next: cfg.Offset}, nil
}

// Next is the offset the next Fetch reads from.
func (f *Fetcher) Next() int64 { return f.next }

// SetOffset moves the next offset.
func (f *Fetcher) SetOffset(offset int64) { f.next = offset }

// Fetch returns the next records (none after a long poll on an idle
// partition) and advances past them and past the transaction markers among
// and after them, which hold no event: Next then tells how far the log was
// read. A *LostOffsetsError leaves the position where it was.
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
	buf, next, err := f.fetchAt(ctx, f.next, f.maxWait)
	if isDecompressionLimit(err) {
		return nil, f.skipUnreadable(ctx, err)
	}
	if err != nil {
		return nil, err
	}
	// A partly read response keeps what was read whole; the rest is
	// fetched again.
	f.next = next
	return buf, nil
}

// fetchAt fetches from offset and reads the response.
func (f *Fetcher) fetchAt(ctx context.Context, offset int64, maxWait time.Duration) (*buffer, int64, error) {
	res, err := f.client.Fetch(ctx, &kafka.FetchRequest{
		Topic: f.topic, Partition: f.partition, Offset: offset,
		MinBytes: 1, MaxBytes: f.maxBytes, MaxWait: maxWait, IsolationLevel: kafka.ReadCommitted,
	})
	if err != nil {
		return nil, offset, fmt.Errorf("fetch topic %s partition %d offset %d: %w", f.topic, f.partition, offset, err)
	}
	if res.Error != nil {
		if errors.Is(res.Error, kafka.OffsetOutOfRange) {
			return nil, offset, f.outOfRange(ctx)
		}
		return nil, offset, fmt.Errorf("fetch topic %s partition %d offset %d: %w", f.topic, f.partition, offset, res.Error)
	}
	f.HighWatermark = res.HighWatermark
	saved := f.next
	f.next = offset
	buf, next, err := f.read(res.Records)
	f.next = saved
	if err != nil && len(buf.msgs) == 0 {
		return nil, offset, fmt.Errorf("read records topic %s partition %d offset %d: %w", f.topic, f.partition, offset, err)
	}
	return buf, next, nil
}

// UnreadableError reports offsets [From, To) of a partition that the
// Fetcher moved past without reading them: their batch decompresses to more
// than MaxBatchDecompressed. Fetch returns it once; the next Fetch reads
// from To.
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

// skipUnreadable finds where the batch at f.next that kafka-go cannot
// decompress within the bound ends, moves past it and reports the skipped
// offsets. A batch's last offset is in its header, which kafka-go does not
// return when decoding fails, so the end is searched for: probes at growing
// distances until one reads (the batch holding that offset starts after the
// bad one), then halving between the last failing probe and that start.
// Each probe decompresses at most MaxBatchDecompressed bytes. A second bad
// batch within the searched range is skipped with the first, and so would
// be the good batches between them: the ERROR log of the caller names the
// whole range.
func (f *Fetcher) skipUnreadable(ctx context.Context, cause error) error {
	from := f.next
	_, end, err := f.Bounds(ctx)
	if err != nil {
		return err
	}
	probe := func(at int64) (good bool, base int64, err error) {
		buf, next, err := f.fetchAt(ctx, at, 10*time.Millisecond)
		switch {
		case isDecompressionLimit(err):
			return false, 0, nil
		case err != nil:
			return false, 0, err
		case len(buf.msgs) > 0:
			return true, min(buf.msgs[0].Offset, at), nil
		default:
			return true, min(next, at), nil
		}
	}
	lo, hi := from, max(end, from+1) // lo: known bad; hi: where good data (or the log's end) starts
	for step := int64(1); lo+step < end; step *= 2 {
		good, base, err := probe(lo + step)
		if err != nil {
			return err
		}
		if good {
			hi = max(base, lo+1)
			break
		}
		lo += step
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		good, base, err := probe(mid)
		if err != nil {
			return err
		}
		if good {
			hi = max(base, lo+1)
		} else {
			lo = mid
		}
	}
	f.next = hi
	return &UnreadableError{Topic: f.topic, Partition: f.partition, From: from, To: hi, Err: cause}
}

// read reads a response's batches: records of data batches, and the
// offsets of control batches (transaction markers), so that the position
// moves past markers too. It returns the offset after the last one read.
func (f *Fetcher) read(rr kafka.RecordReader) (*buffer, int64, error) {
	next := f.next
	batches := []kafka.RecordReader{rr}
	if s, ok := rr.(*protocol.RecordStream); ok {
		batches = s.Records
	}
	buf := buffers.Get().(*buffer)
	msgs := buf.msgs[:0]
	if msgs == nil {
		msgs = make([]kafka.Message, 0, f.hint)
	}
	// A recycled slice is used whatever its size: one that grows is handed
	// back grown, so the buffers settle at the largest responses' size.
	mem := arena{first: f.used, spare: buf.chunks}
	defer func() {
		f.hint, f.used = len(msgs), mem.used
		f.held = mem.alloc + int64(cap(msgs))*messageSize
		buf.msgs, buf.chunks = msgs, append(mem.chunks, mem.spare...)
	}()
	for _, b := range batches {
		_, control := b.(*protocol.ControlBatch)
		for {
			r, err := b.ReadRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return buf, next, err
			}
			if r.Offset < next {
				release(r)
				continue // batches may start before the offset asked for
			}
			if control {
				release(r)
				next = r.Offset + 1
				f.Markers++
				continue
			}
			m, err := message(f.topic, f.partition, r, &mem)
			release(r)
			if err != nil {
				return buf, next, err
			}
			msgs = append(msgs, m)
			next = r.Offset + 1
		}
	}
	return buf, next, nil
}

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

// messageSize is a kafka.Message's own fields, beside what they point to.
const messageSize = int64(unsafe.Sizeof(kafka.Message{}))

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
