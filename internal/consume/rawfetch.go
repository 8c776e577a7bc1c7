package consume

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	fetchapi "github.com/segmentio/kafka-go/protocol/fetch"
)

// Why the Fetcher sends its own fetch requests: kafka.Client.Fetch decodes
// a whole response before it returns, decompressing every record batch in
// it, so the memory of one fetch was its batch count times what each batch
// inflates to (sixty zstd batches of 1 KB on the wire, 7.5 MiB each
// decompressed, took an aggregator to 1.8 GB). rawFetch goes through the
// same kafka.Transport (its connections, TLS, SASL, and its metadata to
// find the partition's leader), but as a protocol.RawExchanger it reads
// the response off the connection as bytes, compressed, and leaves the
// batches to the Fetcher, which inflates and reads them one at a time
// (batch.go) and stops before its records pass its budget.
//
// The ways considered instead: kafka.Conn.ReadBatch reads batches lazily
// too, but hides what a batch is (a transaction marker comes out as a
// record, an unreadable batch's offsets are lost with it), and needs a
// connection per partition leader, with TLS, SASL and leader moves handled
// by hand. A bound on each batch's compression ratio, kept with
// Client.Fetch, would bound a response only at a ratio some legitimate
// batches pass (JSON events that differ by a short id compress a
// hundredfold under zstd): counts are the product, and such a batch would
// be skipped.

// rawFetch is a fetch request of one partition whose response is kept
// undecoded.
type rawFetch struct {
	*fetchapi.Request // routed to the partition's leader (BrokerMessage)
	clientID          string
	version           int16
	// buf is where the response is read: a previous response's, reused.
	buf []byte
	res rawFetchResponse
}

// rawFetchResponse is what the Fetcher needs of a fetch response.
type rawFetchResponse struct {
	highWatermark int64
	err           error // the partition's error code, as a kafka.Error
	// records are the partition's record batches as the broker sent them.
	records []byte
}

var (
	_ protocol.Message       = (*rawFetch)(nil)
	_ protocol.BrokerMessage = (*rawFetch)(nil)
	_ protocol.RawExchanger  = (*rawFetch)(nil)
)

// minFetchVersion is the first fetch version with an isolation level: an
// older one would read records of open and aborted transactions.
const minFetchVersion = 4

// maxFetchVersion is the last version kafka-go's fetch request encodes
// (also the last one without tagged fields, which the parser below does
// not read).
const maxFetchVersion = 11

// maxResponseBytes refuses a response size no broker sends for one
// partition: a broken stream, not a response to read into memory.
const maxResponseBytes = 1 << 30

// Required notes the version the connection negotiated; the exchange is
// always raw.
func (r *rawFetch) Required(versions map[protocol.ApiKey]int16) bool {
	r.version = min(versions[protocol.Fetch], maxFetchVersion)
	return true
}

// RawExchange writes the request and reads its response whole, undecoded.
// An error closes the connection (kafka.Transport drops it), so a response
// read in part never confuses the next request on it.
func (r *rawFetch) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	if r.version < minFetchVersion {
		return nil, fmt.Errorf("broker fetch version %d: read_committed needs %d or later", r.version, minFetchVersion)
	}
	const correlationID = 1 // one request at a time on the connection
	if err := protocol.WriteRequest(rw, r.version, correlationID, r.clientID, r.Request); err != nil {
		return nil, fmt.Errorf("write fetch request: %w", err)
	}
	var size [4]byte
	if _, err := io.ReadFull(rw, size[:]); err != nil {
		return nil, fmt.Errorf("read fetch response: %w", err)
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 4 || n > maxResponseBytes {
		return nil, fmt.Errorf("read fetch response: size %d out of range", n)
	}
	if cap(r.buf) < int(n) {
		r.buf = make([]byte, n)
	}
	r.buf = r.buf[:n]
	if _, err := io.ReadFull(rw, r.buf); err != nil {
		return nil, fmt.Errorf("read fetch response: %w", err)
	}
	if id := int32(binary.BigEndian.Uint32(r.buf)); id != correlationID {
		return nil, fmt.Errorf("read fetch response: correlation id %d, want %d", id, correlationID)
	}
	res, err := r.parse(r.buf[4:])
	if err != nil {
		return nil, fmt.Errorf("read fetch response v%d: %w", r.version, err)
	}
	r.res = res
	return r, nil
}

// parse reads a fetch response body (v4 to v11) for the one partition
// asked for.
func (r *rawFetch) parse(b []byte) (rawFetchResponse, error) {
	d := wire{b: b}
	v := r.version
	d.int32() // throttle time
	if v >= 7 {
		if code := d.int16(); code != 0 {
			return rawFetchResponse{}, kafka.Error(code)
		}
		d.int32() // session id
	}
	want := r.Topics[0]
	if n := d.int32(); n != 1 && d.err == nil {
		return rawFetchResponse{}, fmt.Errorf("%d topics in the answer, want 1", n)
	}
	if topic := d.string(); topic != want.Topic && d.err == nil {
		return rawFetchResponse{}, fmt.Errorf("topic %q in the answer, want %q", topic, want.Topic)
	}
	if n := d.int32(); n != 1 && d.err == nil {
		return rawFetchResponse{}, fmt.Errorf("%d partitions in the answer, want 1", n)
	}
	if p := d.int32(); p != want.Partitions[0].Partition && d.err == nil {
		return rawFetchResponse{}, fmt.Errorf("partition %d in the answer, want %d", p, want.Partitions[0].Partition)
	}
	var res rawFetchResponse
	if code := d.int16(); code != 0 {
		res.err = kafka.Error(code)
	}
	res.highWatermark = d.int64()
	d.int64() // last stable offset
	if v >= 5 {
		d.int64() // log start offset
	}
	if n := d.int32(); n > 0 {
		d.skip(int(n) * 16) // aborted transactions: producer id, first offset
	}
	if v >= 11 {
		d.int32() // preferred read replica
	}
	if n := d.int32(); n > 0 {
		res.records = d.bytes(int(n))
	}
	return res, d.err
}

// wire reads big-endian fields off a response body; the first short read
// is kept in err and every read after it returns zero.
type wire struct {
	b   []byte
	err error
}

var errShortResponse = errors.New("response shorter than its fields")

func (d *wire) bytes(n int) []byte {
	if d.err != nil || n < 0 || n > len(d.b) {
		if d.err == nil {
			d.err = errShortResponse
		}
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *wire) skip(n int) { d.bytes(n) }

func (d *wire) int16() int16 {
	if b := d.bytes(2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (d *wire) int32() int32 {
	if b := d.bytes(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

func (d *wire) int64() int64 {
	if b := d.bytes(8); b != nil {
		return int64(binary.BigEndian.Uint64(b))
	}
	return 0
}

func (d *wire) string() string {
	return string(d.bytes(int(d.int16())))
}

// exchange sends one fetch request for the Fetcher's partition from offset
// and returns its response, undecoded. maxBytes is the request's size.
func (f *Fetcher) exchange(ctx context.Context, offset, maxBytes int64, maxWait time.Duration) (rawFetchResponse, error) {
	// As kafka.Client.Fetch does: the client's timeout bounds the request,
	// and the broker is asked to answer within half of what is left of it.
	if t := f.client.Timeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	if deadline, ok := ctx.Deadline(); ok {
		maxWait = min(maxWait, time.Until(deadline)/2)
	}
	req := &rawFetch{
		Request: &fetchapi.Request{
			ReplicaID: -1, MaxWaitTime: int32(max(maxWait.Milliseconds(), 1)),
			MinBytes: 1, MaxBytes: int32(maxBytes), IsolationLevel: int8(kafka.ReadCommitted),
			SessionID: -1, SessionEpoch: -1,
			Topics: []fetchapi.RequestTopic{{Topic: f.topic, Partitions: []fetchapi.RequestPartition{{
				Partition: int32(f.partition), CurrentLeaderEpoch: -1, FetchOffset: offset,
				LogStartOffset: -1, PartitionMaxBytes: int32(maxBytes),
			}}}},
		},
		clientID: f.clientID,
		buf:      f.resp,
	}
	// The connection's goroutine reads into req.buf: only a response
	// handed back whole frees it for the next request.
	f.resp = nil
	addr := f.client.Addr
	m, err := f.transport.RoundTrip(ctx, addr, req)
	if err != nil {
		return rawFetchResponse{}, err
	}
	r, ok := m.(*rawFetch)
	if !ok {
		return rawFetchResponse{}, fmt.Errorf("fetch answered with %T", m)
	}
	f.resp = r.buf
	return r.res, nil
}
