package consume

import (
	"errors"
	"fmt"
	"io"

	"github.com/segmentio/kafka-go/compress"
)

// MaxBatchDecompressed is the most bytes one record batch may decompress
// to in this process. kafka-go decompresses a whole batch into memory
// before any of its records is handed over, so a batch a few KB on the
// wire (a gzip or zstd bomb) could otherwise take all the memory there is.
// floodgate's contract is far below it: events are at most event.MaxSize
// (4 KiB) and the producer's batches at most 1 MiB before compression
// (producer.DefaultBatchBytes). A batch past the bound is not read: the
// Fetcher reports its offsets as an *UnreadableError and moves past them.
//
// This bounds one batch. A fetch response may hold many (FetchMaxBytes of
// compressed bytes on the wire, a thousand batches of a few hundred bytes
// each): the Fetcher decompresses them one at a time and stops the fetch
// before its records pass FetcherConfig.MaxHeldBytes, so a response costs
// at most that budget and one batch inflated, whatever its batch count. The
// broker's max.message.bytes (topics.EventsMaxMessageBytes) bounds one
// compressed batch, not its decompressed size.
const MaxBatchDecompressed = 8 << 20

// ErrDecompressionLimit is the error a bounded codec's reader returns once
// a batch decompresses to more than MaxBatchDecompressed.
var ErrDecompressionLimit = errors.New("floodgate: record batch decompresses to more than the limit")

// kafka-go keeps its codecs in a package table (compress.Codecs) that its
// decoder reads without a lock. Wrapping the table while a reader or writer
// runs would race, so it is wrapped once, at package init, before any
// fetch of this process can run.
func init() { boundCodecs(MaxBatchDecompressed) }

func boundCodecs(limit int64) {
	for i, c := range compress.Codecs {
		if c == nil {
			continue
		}
		if _, ok := c.(boundedCodec); ok {
			continue
		}
		compress.Codecs[i] = boundedCodec{Codec: c, limit: limit}
	}
}

// boundedCodec is a kafka-go codec whose readers stop at limit bytes.
type boundedCodec struct {
	compress.Codec
	limit int64
}

func (c boundedCodec) NewReader(r io.Reader) io.ReadCloser {
	return &boundedReader{rc: c.Codec.NewReader(r), left: c.limit}
}

type boundedReader struct {
	rc   io.ReadCloser
	left int64
}

func (r *boundedReader) Read(p []byte) (int, error) {
	if r.left < 0 {
		return 0, ErrDecompressionLimit
	}
	// Ask for one byte more than is left: getting it proves the batch is
	// over the limit without decompressing further.
	if int64(len(p)) > r.left+1 {
		p = p[:r.left+1]
	}
	n, err := r.rc.Read(p)
	r.left -= int64(n)
	if r.left < 0 {
		return n + int(r.left), fmt.Errorf("%w (%d bytes)", ErrDecompressionLimit, MaxBatchDecompressed)
	}
	return n, err
}

func (r *boundedReader) Close() error { return r.rc.Close() }
