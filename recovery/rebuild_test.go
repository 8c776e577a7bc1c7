package recovery_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"floodgate/event"
	"floodgate/recovery"
	"floodgate/rules"
	"floodgate/stacktest"
	"floodgate/window"
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
	res, err := recovery.Rebuild(ctx, recovery.Config{Brokers: brokers, Topic: topic, Group: "g", Store: st, Rules: set,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages != 6 || res.Events != 4 || res.Invalid != 2 {
		t.Fatalf("rebuild: %d messages, %d events counted, %d skipped; want 6, 4 (within the 1m skew), 2", res.Messages, res.Events, res.Invalid)
	}
}
