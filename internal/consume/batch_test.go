package consume

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// testMessages are records of every shape a batch can hold: keys and
// values null, empty and not, headers none, several, with null and empty
// values, a large value.
func testMessages(n int) []kafka.Message {
	base := time.Now().Truncate(time.Millisecond).Add(-time.Hour)
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		m := kafka.Message{Time: base.Add(time.Duration(i*37) * time.Millisecond)}
		switch i % 5 {
		case 0:
			m.Key, m.Value = []byte(fmt.Sprintf("ip:198.51.100.%d", i%256)), []byte(fmt.Sprintf(`{"v":1,"n":%d}`, i))
		case 1:
			m.Value = []byte{}
		case 2:
			m.Key = []byte{}
			m.Headers = []kafka.Header{{Key: "floodgate-counted", Value: []byte("1")}, {Key: "", Value: nil}, {Key: "e", Value: []byte{}}}
		case 3:
			m.Key, m.Value = []byte("k"), bytes.Repeat([]byte{byte(i)}, 100<<10)
		case 4:
			m.Key = []byte("only-a-key")
			m.Headers = []kafka.Header{{Key: "floodgate-take", Value: []byte(fmt.Sprintf("0/%d-0", i))}}
		}
		msgs[i] = m
	}
	return msgs
}

// TestV2BatchesReadAsKafkaGoReadsThem: every batch of topics written with
// each codec by kafka-go, and in transactions by Kafka's Java producer
// (control batches among them, snappy in its own framing), reads record for record as kafka-go's own
// decoder reads it: offsets, times, keys, values and headers.
func TestV2BatchesReadAsKafkaGoReadsThem(t *testing.T) {
	bs := stacktest.Brokers(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for _, codec := range []kafka.Compression{0, kafka.Gzip, kafka.Snappy, kafka.Lz4, kafka.Zstd} {
		t.Run(fmt.Sprint("codec ", codec), func(t *testing.T) {
			topic := stacktest.Topic(t, bs, 1)
			w := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: topic, Compression: codec, BatchSize: 7, BatchBytes: 4 << 20,
				RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
			msgs := testMessages(60)
			for i := 0; i < len(msgs); i += 20 {
				if err := w.WriteMessages(ctx, msgs[i:i+20]...); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			batches, records, _ := compareBatches(t, ctx, bs, topic, 0)
			if records != len(msgs) || batches < 3 {
				t.Fatalf("%d records in %d batches, want %d in at least 3", records, batches, len(msgs))
			}
		})
	}
	for _, codec := range []string{"zstd", "snappy"} {
		t.Run("java transactions "+codec, func(t *testing.T) {
			cp := os.Getenv("FLOODGATE_KAFKA_CLASSPATH")
			if cp == "" {
				t.Fatal("FLOODGATE_KAFKA_CLASSPATH is not set: run under `eval \"$(scripts/stack env)\"` (make test does)")
			}
			topic := stacktest.Topic(t, bs, 1)
			java := exec.CommandContext(ctx, "java", "-Xmx256m", "-cp", cp, "org.apache.kafka.tools.ProducerPerformance",
				"--topic", topic, "--num-records", "300", "--record-size", "40", "--throughput", "-1",
				"--transactional-id", "batches-"+topic, "--transaction-duration-ms", "20",
				"--producer-props", "bootstrap.servers="+strings.Join(bs, ","), "acks=all", "compression.type="+codec)
			if out, err := java.CombinedOutput(); err != nil {
				t.Fatalf("ProducerPerformance: %v\n%s", err, out)
			}
			_, records, markers := compareBatches(t, ctx, bs, topic, 0)
			if records != 300 || markers == 0 {
				t.Fatalf("%d records and %d markers, want 300 and some", records, markers)
			}
		})
	}
}

// compareBatches reads topic's partition from its start to its end in raw
// fetch responses and checks each v2 batch against kafka-go's decoder.
func compareBatches(t *testing.T, ctx context.Context, bs []string, topic string, partition int) (batches, records, markers int) {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(bs...), Timeout: 30 * time.Second}
	f, err := NewFetcher(FetcherConfig{Client: client, Topic: topic, Partition: partition, Offset: kafka.FirstOffset, MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	first, end, err := f.Bounds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for next := first; next < end; {
		res, err := f.exchange(ctx, next, 64<<10, 100*time.Millisecond)
		if err != nil || res.err != nil {
			t.Fatalf("fetch at %d: %v %v", next, err, res.err)
		}
		for rest := res.records; len(rest) > 0; {
			raw, last, ok := nextBatch(&rest)
			if !ok {
				break
			}
			if raw[v2Magic] != 2 {
				t.Fatalf("batch at %d: magic %d", next, raw[v2Magic])
			}
			batches++
			n, control := compareBatch(t, raw)
			if control {
				markers += n
			} else {
				records += n
			}
			next = last + 1
		}
	}
	return batches, records, markers
}

// compareBatch reads raw both ways and returns its record count.
func compareBatch(t *testing.T, raw []byte) (int, bool) {
	t.Helper()
	want, err := decodeBatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	b, err := openV2(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer b.done()
	_, control := want.(*protocol.ControlBatch)
	if b.control != control {
		t.Fatalf("batch at %d: control %t, kafka-go says %t", b.base, b.control, control)
	}
	var mem arena
	n := 0
	for {
		w, werr := want.ReadRecord()
		r, err := b.next()
		if errors.Is(werr, io.EOF) || errors.Is(err, io.EOF) {
			if !errors.Is(werr, io.EOF) || !errors.Is(err, io.EOF) {
				t.Fatalf("batch at %d: record %d: kafka-go %v, here %v", b.base, n, werr, err)
			}
			return n, control
		}
		if werr != nil || err != nil {
			t.Fatalf("batch at %d: record %d: kafka-go %v, here %v", b.base, n, werr, err)
		}
		wm, err := message("t", 0, w, &mem)
		release(w)
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := messageV2("t", 0, &r, &mem)
		if err != nil {
			t.Fatal(err)
		}
		if m.Offset != wm.Offset || !m.Time.Equal(wm.Time) || !sameBytes(m.Key, wm.Key) || !sameBytes(m.Value, wm.Value) || len(m.Headers) != len(wm.Headers) {
			t.Fatalf("record at %d: offset %d, time %s, key %q, %d value bytes, %d headers; kafka-go: %d, %s, %q, %d, %d",
				wm.Offset, m.Offset, m.Time, m.Key, len(m.Value), len(m.Headers), wm.Offset, wm.Time, wm.Key, len(wm.Value), len(wm.Headers))
		}
		for i, h := range m.Headers {
			if h.Key != wm.Headers[i].Key || !sameBytes(h.Value, wm.Headers[i].Value) {
				t.Fatalf("record at %d: header %d %q=%q, kafka-go %q=%q", m.Offset, i, h.Key, h.Value, wm.Headers[i].Key, wm.Headers[i].Value)
			}
		}
		n++
	}
}

// sameBytes tells whether a and b are equal. A null field and an empty one
// are not told apart: the arena hands out an empty slice as nil or not
// depending on what it cut before, for either decoder.
func sameBytes(a, b []byte) bool { return bytes.Equal(a, b) }

// FuzzRead: whatever bytes a response's records hold, reading them never
// panics, and never hands over more than the budget (but for one record).
func FuzzRead(f *testing.F) {
	record := []byte{0x0e, 0, 0, 0, 1, 2, 'x', 0}
	f.Add(v2TestBatch(0, 1, record))
	f.Add(v2TestBatch(4, 1, []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x50, byte(1 | len(record)<<3), 0, 0, 0x0e, 0, 0, 0, 1, 2, 'x', 0}))
	f.Add(v2TestBatch(0, 3, bytes.Repeat(record, 3)))
	f.Add(append(v2TestBatch(0, 1, record), v2TestBatch(0, 1, record)...))
	f.Fuzz(func(t *testing.T, records []byte) {
		// Half the inputs get a valid CRC, so that the records are read.
		if len(records) >= v2Header && len(records)%2 == 0 {
			binary.BigEndian.PutUint32(records[v2CRC:], crc32.Checksum(records[v2Attributes:], castagnoli))
		}
		fe := &Fetcher{topic: "t", maxHeld: 1 << 10}
		buf, next, err := fe.read(records)
		var held int64
		for _, m := range buf.msgs {
			held += messageSize + int64(len(m.Key)+len(m.Value))
		}
		if len(buf.msgs) > 1 && held > 2<<10+int64(len(records)) {
			t.Fatalf("%d records holding %d bytes, budget 1 KiB", len(buf.msgs), held)
		}
		_, _ = next, err
	})
}

// v2TestBatch is a v2 batch of count records whose records section is
// payload, compressed with codec.
func v2TestBatch(codec int16, count int32, payload []byte) []byte {
	b := make([]byte, v2Header, v2Header+len(payload))
	binary.BigEndian.PutUint32(b[8:], uint32(v2Header-batchPrefix+len(payload)))
	b[v2Magic] = 2
	binary.BigEndian.PutUint16(b[v2Attributes:], uint16(codec))
	binary.BigEndian.PutUint32(b[v2LastOffsetDelta:], uint32(count-1))
	binary.BigEndian.PutUint32(b[v2Count:], uint32(count))
	b = append(b, payload...)
	binary.BigEndian.PutUint32(b[v2CRC:], crc32.Checksum(b[v2Attributes:], castagnoli))
	return b
}
