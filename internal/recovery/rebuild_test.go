package recovery_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/recovery"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// Events further ahead of the clock than MaxFutureSkew are dead-lettered by
// the live aggregator: the rebuild skips them too (as invalid) instead of
// counting them; events within the skew count.
func TestRebuildSkipsEventsTooFarAhead(t *testing.T) {
	brokers := stacktest.Brokers(t)
	rdb := stacktest.Redis(t)
	topic := stacktest.Topic(t, brokers, 1)
	set, err := rules.Parse([]byte(strings.TrimLeft(`
rules:
  - name: r
    action: login_failed
    kinds: [ip]
    limits: [100/1h]
`, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	var msgs []kafka.Message
	for _, ahead := range []time.Duration{0, 0, 0, 3 * time.Second, 2 * time.Minute, time.Hour} {
		e := event.Event{V: event.Version, ID: event.NewID(), Action: "login_failed", Kind: "ip", Subject: "192.0.2.7", TS: now.Add(ahead), N: 1}
		v, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(e.Key()), Value: v})
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: 10 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb)})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := live.NewApplier(st, live.ApplierConfig{WriteBack: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := recovery.Rebuild(ctx, recovery.Config{Brokers: brokers, Topic: topic, Group: "g", Store: st, Applier: ap, Rules: set,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages != 6 || res.Events != 4 || res.Invalid != 2 {
		t.Fatalf("rebuild: %d messages, %d events counted, %d skipped; want 6, 4 (within the 1m skew), 2", res.Messages, res.Events, res.Invalid)
	}
}

// rebuild --reset deletes floodgate's own key shapes under the prefix and
// nothing else: not another application's keys that a bare "prefix:*"
// matches on a shared Redis, even when the prefix holds glob characters.
func TestRebuildResetDeletesOnlyFloodgateKeys(t *testing.T) {
	brokers := stacktest.Brokers(t)
	rdb := stacktest.Redis(t)
	topic := stacktest.Topic(t, brokers, 1)
	base := stacktest.Prefix(t, rdb)
	prefix := base + "*[x]?"
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := live.NewApplier(st, live.ApplierConfig{WriteBack: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ours := []string{st.Keys().State(0), st.Keys().Offset("g", topic, 0),
		prefix + ":{login:ip:192.0.2.1}:s:1", prefix + ":off:g:" + topic + ":0"}
	theirs := []string{base + "-other:session", prefix + ":session:42", base + "x[x]y:off:1",
		"{" + prefix + ":p1x}:cache", "{" + prefix + ":payments}:1", "{" + base + "-a[x]b:p0}:@state"}
	for _, k := range append(append([]string(nil), ours...), theirs...) {
		if err := rdb.Set(ctx, k, "1", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { rdb.Del(context.Background(), theirs...) })
	set, err := rules.Parse([]byte("rules:\n  - name: r\n    action: login\n    kinds: [ip]\n    limits: [100/1h]\n"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := recovery.Rebuild(ctx, recovery.Config{Brokers: brokers, Topic: topic, Group: "g", Store: st, Applier: ap, Rules: set, Reset: true, Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != int64(len(ours)) {
		t.Errorf("deleted %d keys, want our %d", res.Deleted, len(ours))
	}
	for _, k := range theirs {
		if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Errorf("key %q of another application: exists %d, %v", k, n, err)
		}
	}
	for _, k := range ours[2:] {
		if n, _ := rdb.Exists(ctx, k).Result(); n != 0 {
			t.Errorf("old-layout key %q left", k)
		}
	}
}

// A record batch that inflates past the decompression bound (a gzip bomb)
// is skipped by the rebuild as by the live aggregator: the events behind
// it are counted, its offset counts as invalid.
func TestRebuildSkipsABomb(t *testing.T) {
	brokers := stacktest.Brokers(t)
	rdb := stacktest.Redis(t)
	topic := stacktest.Topic(t, brokers, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	bomb := make([]byte, consume.MaxBatchDecompressed+(1<<20))
	gz := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Compression: kafka.Gzip, BatchBytes: 64 << 20, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	if err := gz.WriteMessages(ctx, kafka.Message{Key: []byte("ip:192.0.2.8"), Value: bomb}); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	var msgs []kafka.Message
	for range 2 {
		e := event.Event{V: event.Version, ID: event.NewID(), Action: "login_failed", Kind: "ip", Subject: "192.0.2.8", TS: time.Now(), N: 1}
		v, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(e.Key()), Value: v})
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb)})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := live.NewApplier(st, live.ApplierConfig{WriteBack: true})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse([]byte("rules:\n  - name: r\n    action: login_failed\n    kinds: [ip]\n    limits: [100/1h]\n"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := recovery.Rebuild(ctx, recovery.Config{Brokers: brokers, Topic: topic, Group: "g", Store: st, Applier: ap, Rules: set})
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 2 || res.Invalid != 1 {
		t.Fatalf("rebuild: %d events counted, %d skipped; want 2 and the bomb's 1", res.Events, res.Invalid)
	}
	if next, ok, err := st.Resume(ctx, "g", topic, 0); err != nil || !ok || next != 3 {
		t.Fatalf("stored offset %d, %v, %v; want 3", next, ok, err)
	}
}
