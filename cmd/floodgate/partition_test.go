package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// A record small on the wire but over the contract once decompressed (3 MiB
// of gzip) stalls no partition: the live and history groups both go on
// past it, the events of one IP behind it are counted by both and the live
// path denies the IP, and the DLQ holds a stub of a few KB with the
// record's size, hash and reason.
func TestAggregatorGoesOnPastAnOversizedGzipRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{partitions: 1, history: true, rules: `
rules:
  - name: brute
    action: login_failed
    kinds: [ip]
    limits: [2/1h]
`})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ip = "192.0.2.50"
	big := bytes.Repeat([]byte("A"), 3<<20)
	copy(big, `{"v":1,"pad":"`)
	gz := &kafka.Writer{Addr: kafka.TCP(e.brokers...), Topic: e.topic, Compression: kafka.Gzip, BatchBytes: 16 << 20,
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	writeAll(t, ctx, gz, []kafka.Message{{Key: []byte("ip:" + ip), Value: big}})
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	w := e.writer()
	defer w.Close()
	var msgs []kafka.Message
	for range 3 {
		v, err := event.Encode(event.Event{ID: event.NewID(), Action: "login_failed", Kind: "ip", Subject: ip, TS: time.Now(), N: 1})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte("ip:" + ip), Value: v})
	}
	writeAll(t, ctx, w, msgs)

	p := e.start("run")
	sub := window.Subject{Action: "login_failed", Kind: "ip", Subject: ip}
	var st window.State
	stacktest.WaitFor(t, "the IP denied on its 3 events", time.Minute, func() bool {
		states, err := e.store.Check(ctx, time.Now(), []window.Query{{Subject: sub, Windows: []time.Duration{time.Hour}}})
		if err != nil {
			t.Fatal(err)
		}
		st = states[0]
		return st.Deny != nil && st.Sums[0] == 3
	})
	q := history.NewQuerier(e.pool)
	stacktest.WaitFor(t, "history counting the same 3 events", time.Minute, func() bool {
		n, err := q.Total(ctx, history.Key{Action: "login_failed", Kind: "ip", Subject: ip})
		return err == nil && n == 3
	})
	p.stop(t)
	e.checkOffsets() // the live group stands past the record

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, Topic: e.dlq, Partition: 0, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := headers(m)
	size := len(m.Key) + len(m.Value)
	for _, x := range m.Headers {
		size += len(x.Key) + len(x.Value)
	}
	sum := sha256.Sum256(big)
	if size > 4<<10 || h[consume.HeaderDLQReason] != event.ReasonTooLarge || h[consume.HeaderDLQSize] != strconv.Itoa(len(big)) ||
		h[consume.HeaderDLQSHA256] != hex.EncodeToString(sum[:]) || h[consume.HeaderDLQOffset] != "0" {
		t.Fatalf("DLQ stub of %d bytes, headers %v", size, h)
	}
}
