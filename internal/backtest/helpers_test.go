package backtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

func mustRules(tb testing.TB, yaml string) *rules.Set {
	tb.Helper()
	s, err := rules.Parse([]byte(strings.TrimLeft(yaml, "\n")))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// stream publishes events to a topic with record times of the test's
// choosing (the live aggregator's clock stands for them), and remembers
// where each partition's log ends.
type stream struct {
	w          *kafka.Writer
	partitions int
	end        []int64
}

func newStream(tb testing.TB, brokers []string, topic string, partitions int) *stream {
	tb.Helper()
	// One produce request per partition and call: the aggregator fetches a
	// call's events of a partition whole.
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Murmur2Balancer{Consistent: true},
		RequiredAcks: kafka.RequireAll, BatchSize: 100_000, BatchBytes: 64 << 20, BatchTimeout: time.Millisecond}
	tb.Cleanup(func() { _ = w.Close() })
	return &stream{w: w, partitions: partitions, end: make([]int64, partitions)}
}

// publish writes evs with record time at (zero: each event's own time),
// in one call.
func (s *stream) publish(tb testing.TB, at time.Time, evs ...event.Event) {
	tb.Helper()
	msgs := make([]kafka.Message, len(evs))
	for i, e := range evs {
		v, err := event.Encode(e)
		if err != nil {
			tb.Fatal(err)
		}
		rt := at
		if rt.IsZero() {
			rt = e.TS
		}
		msgs[i] = kafka.Message{Key: []byte(e.Key()), Value: v, Time: rt}
		s.end[window.Partition(window.Subject{Action: e.Action, Kind: e.Kind, Subject: e.Subject}, s.partitions)]++
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.w.WriteMessages(ctx, msgs...); err != nil {
		tb.Fatalf("publish %d events: %v", len(msgs), err)
	}
}

// decisionKey is everything a decision says but its id and message.
func decisionKey(d window.DecisionMessage) string {
	lim := d.Limit.String()
	if d.Bucket != nil {
		lim = d.Bucket.String()
	}
	return fmt.Sprintf("%s %s %s rule=%s limit=%s count=%d until=%s ts=%s shadow=%v",
		d.Action, d.Kind, d.Subject, d.Rule, lim, d.Count, d.Until.UTC().Format(time.RFC3339Nano), d.TS.UTC().Format(time.RFC3339), d.Shadow)
}

// collector gathers a backtest's decisions (OnDecision).
type collector struct {
	mu   sync.Mutex
	keys map[string][]string // set -> decision keys
}

func (c *collector) add(set string, d window.DecisionMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys = map[string][]string{}
	}
	c.keys[set] = append(c.keys[set], decisionKey(d))
}

func (c *collector) sorted(set string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(slices.Values(c.keys[set]))
}

// compareKeys fails with the differences of two sorted key lists.
func compareKeys(tb testing.TB, what string, got, want []string) {
	tb.Helper()
	if slices.Equal(got, want) {
		return
	}
	var only []string
	for _, k := range want {
		if !slices.Contains(got, k) {
			only = append(only, "missing: "+k)
		}
	}
	for _, k := range got {
		if !slices.Contains(want, k) {
			only = append(only, "extra:   "+k)
		}
	}
	tb.Fatalf("%s: %d, want %d:\n%s", what, len(got), len(want), strings.Join(only, "\n"))
}

func toJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// pick returns one of xs.
func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }
