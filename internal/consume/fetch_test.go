package consume_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// produceBombs writes n records of size bytes each (a few hundred bytes
// on the wire), each in a zstd batch of its own.
func produceBombs(t *testing.T, ctx context.Context, brokers []string, topic string, n, size int) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Compression: kafka.Zstd, BatchBytes: int64(size) + 1<<20,
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	value := bytes.Repeat([]byte{' '}, size)
	for i := range n {
		if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("ip:192.0.2.7"), Value: value}); err != nil {
			t.Fatalf("produce bomb %d: %v", i, err)
		}
	}
}

// TestFetcherBoundsAFetchOfManyBombs: records of 7.5 MiB, each a zstd
// batch of its own a few hundred bytes long, many of them in one 1 MiB
// fetch response. Each batch is under MaxBatchDecompressed, so none is
// skipped; kafka.Client.Fetch inflated them all before returning any (its
// one fetch grew the heap by 197 MiB, and allocated 370). Each fetch now
// holds at most its budget (two records), inflates a few batches to get
// there, and the partition is read whole, in order, the events behind the
// records included.
func TestFetcherBoundsAFetchOfManyBombs(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const (
		bombs = 24
		size  = 15 << 19 // 7.5 MiB, under the batch bound
	)
	produceBombs(t, ctx, bs, topic, bombs, size)
	produce(t, ctx, bs, topic, ipEvents(t, "192.0.2.7", 3, time.Now()))
	const end = bombs + 3

	client := &kafka.Client{Addr: kafka.TCP(bs...), Timeout: 30 * time.Second}
	f, err := consume.NewFetcher(consume.FetcherConfig{Client: client, Topic: topic, Offset: kafka.FirstOffset, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// What one fetch may hold: its budget (give or take an arena chunk).
	// What it may inflate: that, the part of its first batch before its
	// offset, and the batch it stopped in. What the heap may grow by while
	// its records are held: what they hold, and the buffers batches are
	// inflated into, which stay pooled (twice 8 MiB each, with room to
	// spare: kafka.Client.Fetch grew it by 197 MiB).
	const (
		heldBound     = consume.DefaultMaxHeldBytes + 64<<10
		inflatedBound = consume.DefaultMaxHeldBytes + 2*consume.MaxBatchDecompressed
		heapBound     = heldBound + 4*consume.MaxBatchDecompressed
	)
	var ms runtime.MemStats
	want := int64(0)
	fetches := 0
	var maxHeld, maxInflated, maxGrowth int64
	for f.Next() < end {
		if fetches++; fetches > 4*end {
			t.Fatalf("%d fetches and still at offset %d of %d", fetches, f.Next(), end)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := int64(ms.HeapAlloc)
		msgs, err := f.Fetch(ctx)
		runtime.GC()
		runtime.ReadMemStats(&ms)
		growth := int64(ms.HeapAlloc) - before
		if err != nil {
			t.Fatalf("fetch %d at offset %d: %v", fetches, want, err)
		}
		maxHeld, maxInflated, maxGrowth = max(maxHeld, f.Held()), max(maxInflated, f.Inflated()), max(maxGrowth, growth)
		if growth > heapBound {
			t.Errorf("fetch %d (%d records from offset %d) grew the heap by %d MiB, bound %d MiB", fetches, len(msgs), want, growth>>20, heapBound>>20)
		}
		if held := f.Held(); held > heldBound {
			t.Errorf("fetch %d (%d records from offset %d) holds %d MiB, bound %d MiB", fetches, len(msgs), want, held>>20, heldBound>>20)
		}
		if inflated := f.Inflated(); inflated > inflatedBound {
			t.Errorf("fetch %d (%d records from offset %d) inflated %d MiB, bound %d MiB", fetches, len(msgs), want, inflated>>20, inflatedBound>>20)
		}
		for _, m := range msgs {
			if m.Offset != want {
				t.Fatalf("fetch %d read offset %d, want %d: records skipped or read twice", fetches, m.Offset, want)
			}
			if m.Offset < bombs && len(m.Value) != size {
				t.Fatalf("record %d: %d bytes, want %d", m.Offset, len(m.Value), size)
			}
			want++
		}
		msgs = nil // let the next fetch's growth be its own
	}
	if want != end {
		t.Fatalf("read %d records, want %d", want, end)
	}
	if f.Cuts == 0 || fetches < bombs/2 {
		t.Errorf("%d fetches, %d cut by the budget: the response of %d records was read whole at once", fetches, f.Cuts, bombs)
	}
	t.Logf("%d records in %d fetches, %d cut by the budget; a fetch inflated at most %d MiB (bound %d), held %d MiB (bound %d), grew the heap by %d MiB (bound %d)",
		end, fetches, f.Cuts, maxInflated>>20, inflatedBound>>20, maxHeld>>20, heldBound>>20, maxGrowth>>20, heapBound>>20)
}

// produceRawBatch writes one v2 record batch of one record whose records
// section (compressed with codec, attribute bits 0-2) is payload, as a
// producer that builds its own batches can.
func produceRawBatch(t *testing.T, ctx context.Context, brokers []string, topic string, codec int16, payload []byte) {
	t.Helper()
	now := time.Now().UnixMilli()
	b := binary.BigEndian.AppendUint64(nil, 0) // base offset
	b = binary.BigEndian.AppendUint32(b, 0)    // length, set below
	b = binary.BigEndian.AppendUint32(b, 0)    // partition leader epoch
	b = append(b, 2)                           // magic
	b = binary.BigEndian.AppendUint32(b, 0)    // crc, set below
	b = binary.BigEndian.AppendUint16(b, uint16(codec))
	b = binary.BigEndian.AppendUint32(b, 0) // last offset delta
	b = binary.BigEndian.AppendUint64(b, uint64(now))
	b = binary.BigEndian.AppendUint64(b, uint64(now))
	b = binary.BigEndian.AppendUint64(b, ^uint64(0)) // producer id -1
	b = binary.BigEndian.AppendUint16(b, ^uint16(0)) // producer epoch -1
	b = binary.BigEndian.AppendUint32(b, ^uint32(0)) // base sequence -1
	b = binary.BigEndian.AppendUint32(b, 1)          // records
	b = append(b, payload...)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	set := append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 30 * time.Second}
	res, err := client.RawProduce(ctx, &kafka.RawProduceRequest{Topic: topic, RequiredAcks: kafka.RequireAll,
		RawRecords: protocol.RawRecordSet{Reader: bytes.NewReader(set)}})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		t.Fatalf("produce a raw batch: %v", err)
	}
}

// TestFetcherSkipsWhatItCannotReadAlone: between valid events, a record of
// 100 000 empty headers (200 KB of them, a few hundred bytes of zstd) and
// a zstd frame of 21 bytes declaring a 128 MiB window. kafka-go read the
// first into 100 000 headers of 40 bytes each, and its zstd reader took
// the window's 128 MiB before the frame's first byte of content. Each is
// now skipped alone as unreadable, at the cost of a few MiB, and every
// event around them is read.
func TestFetcherSkipsWhatItCannotReadAlone(t *testing.T) {
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	now := time.Now()
	produce(t, ctx, bs, topic, ipEvents(t, "192.0.2.8", 2, now)) // 0, 1
	w := &kafka.Writer{Addr: kafka.TCP(bs...), Topic: topic, Compression: kafka.Zstd, BatchBytes: 16 << 20,
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	events := ipEvents(t, "192.0.2.8", 2, now)
	events[1].Headers = make([]kafka.Header, 100_000)
	if err := w.WriteMessages(ctx, events...); err != nil { // 2, 3: one batch
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// A zstd frame: magic, no content size, window log 27, one raw block
	// of the one record (8 bytes: no key, value "x", no headers).
	record := []byte{0x0e, 0, 0, 0, 1, 2, 'x', 0}
	frame := append([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, (27 - 10) << 3, byte(1 | len(record)<<3), 0, 0}, record...)
	produceRawBatch(t, ctx, bs, topic, 4, frame)                 // 4
	produce(t, ctx, bs, topic, ipEvents(t, "192.0.2.8", 2, now)) // 5, 6

	client := &kafka.Client{Addr: kafka.TCP(bs...), Timeout: 30 * time.Second}
	f, err := consume.NewFetcher(consume.FetcherConfig{Client: client, Topic: topic, Offset: kafka.FirstOffset})
	if err != nil {
		t.Fatal(err)
	}
	var read []int64
	var skipped [][2]int64
	var ms runtime.MemStats
	var maxGrowth int64
	for f.Next() < 7 {
		if len(read)+len(skipped) > 20 {
			t.Fatalf("still at offset %d: read %v, skipped %v", f.Next(), read, skipped)
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := int64(ms.HeapAlloc)
		msgs, err := f.Fetch(ctx)
		runtime.GC()
		runtime.ReadMemStats(&ms)
		maxGrowth = max(maxGrowth, int64(ms.HeapAlloc)-before)
		var u *consume.UnreadableError
		switch {
		case errors.As(err, &u):
			skipped = append(skipped, [2]int64{u.From, u.To})
		case err != nil:
			t.Fatal(err)
		}
		for _, m := range msgs {
			read = append(read, m.Offset)
		}
	}
	if fmt.Sprint(read) != "[0 1 2 5 6]" || fmt.Sprint(skipped) != "[[3 4] [4 5]]" {
		t.Errorf("read %v, skipped %v; want [0 1 2 5 6] read, [3,4) and [4,5) skipped", read, skipped)
	}
	if maxGrowth > 16<<20 {
		t.Errorf("a fetch grew the heap by %d MiB", maxGrowth>>20)
	}
	t.Logf("read %v, skipped %v; a fetch grew the heap by at most %d KiB", read, skipped, maxGrowth>>10)
}
