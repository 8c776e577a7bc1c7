package backtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/backtest"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// liveRules exercise every kind of limit: windows, an allowlist, a shadow
// rule sharing the subjects' counters, a distinct count and a token bucket
// beside a window.
const liveRules = `
rules:
  - name: login
    action: login_failed
    kinds: [ip, email]
    limits: [2/s, 5/m, 9/10m]
    allow: [10.0.0.0/8]
  - name: login-watch
    action: login_failed
    kinds: [ip]
    limits: [4/m]
    shadow: true
  - name: stuffing
    action: login_failed
    kinds: [ip]
    distinct: email
    limits: [3/5m]
  - name: api
    action: api_call
    kinds: [user]
    bucket: {rate: 1/5s, burst: 2}
    limits: [20/10m]
`

// TestBacktestReproducesLiveDecisions records a stream whose live decisions
// are known: the live path (consume.Group + live.Sink + live.Relay, as
// `floodgate aggregator` wires them) counts it into Redis and publishes its
// decisions to a decisions topic, on a clock the test drives. Each step of
// the stream is the events of one second, published together with that
// second as their record time, and the test waits until the aggregator has
// applied them before the next: live batches are then exactly the
// backtest's ticks. The backtest of the same rules over the same topic,
// from a point in the middle (its warm-up before), must find exactly the
// decisions live published in its range.
func TestBacktestReproducesLiveDecisions(t *testing.T) {
	brokers := stacktest.Brokers(t)
	rdb := stacktest.Redis(t)
	const partitions = 3
	topic := stacktest.Topic(t, brokers, partitions)
	decisions := stacktest.Topic(t, brokers, 1)
	set := mustRules(t, liveRules)

	var clock atomic.Int64
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	l := startLive(t, brokers, rdb, topic, decisions, partitions, set, now)

	// About 70 minutes of traffic ending an hour ago: record times Kafka
	// takes, in whole seconds from a whole minute.
	r := rand.New(rand.NewPCG(14, 1))
	start := time.Now().Add(-130 * time.Minute).Truncate(time.Minute)
	s := newStream(t, brokers, topic, partitions)
	sec := start
	var from, last time.Time
	const steps = 320
	for step := range steps {
		sec = sec.Add(gap(r))
		at := sec.Add(time.Duration(r.IntN(1000)) * time.Millisecond)
		if step == steps/2 {
			from = sec
		}
		clock.Store(at.UnixMilli())
		if evs := liveEvents(r, at); len(evs) > 0 {
			s.publish(t, at, evs...)
			l.waitApplied(t, s.end)
		}
		last = at
	}
	got := l.stop(t)

	var want []string
	for _, d := range got {
		if !d.TS.Before(from) {
			want = append(want, decisionKey(d))
		}
	}
	slices.Sort(want)
	byRule := map[string]int{}
	for _, d := range got {
		if !d.TS.Before(from) {
			byRule[d.Rule]++
		}
	}
	if len(byRule) < 4 {
		t.Fatalf("the stream made live decisions in range of rules %v only: want each rule's", byRule)
	}

	var c collector
	rep, err := backtest.Run(context.Background(), backtest.Config{
		Rules: set, From: from, To: last.Add(time.Second), Brokers: brokers, Topic: topic,
		RedisServer: stacktest.RedisServer(t), OnDecision: c.add, MaxPending: 64,
	})
	if err != nil {
		t.Fatal(err)
	}
	compareKeys(t, "backtest decisions against live", c.sorted(backtest.Candidate), want)
	t.Logf("%d live decisions in range reproduced (per rule %v); %d events replayed (%d messages) from %s, %.0f events/s",
		len(want), byRule, rep.Events, rep.Messages, rep.ReadFrom.Format(time.RFC3339), rep.EventsPerSecond)
	if rep.Messages >= int64(s.end[0]+s.end[1]+s.end[2]) {
		t.Fatalf("the backtest read %d messages, the whole topic: the warm-up should start after the stream's start", rep.Messages)
	}
	// The report counts the same decisions.
	n := 0
	for _, d := range rep.Candidate.Denies {
		n += d.Decisions
	}
	if n != len(want) {
		t.Fatalf("report counts %d decisions, want %d:\n%s", n, len(want), toJSON(rep.Candidate))
	}
}

// gap is the time to the next second with events: mostly the next one,
// sometimes a pause, rarely a long one.
func gap(r *rand.Rand) time.Duration {
	switch x := r.IntN(100); {
	case x < 60:
		return time.Second
	case x < 85:
		return time.Duration(2+r.IntN(4)) * time.Second
	case x < 98:
		return time.Duration(20+r.IntN(70)) * time.Second
	default:
		return time.Duration(5+r.IntN(4)) * time.Minute
	}
}

// liveEvents are the events of one second at: a few failed logins by IP
// (with the e-mail tried) and by e-mail, API calls; mostly on time, some
// late, a few slightly ahead (within the accepted skew).
func liveEvents(r *rand.Rand, at time.Time) []event.Event {
	n := r.IntN(7)
	evs := make([]event.Event, 0, n)
	for range n {
		e := event.Event{V: 1, ID: event.NewID(), N: 1}
		switch x := r.IntN(100); {
		case x < 60:
			e.Action, e.Kind = "login_failed", "ip"
			e.Subject = pick(r, "192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "10.0.0.7")
			e.Attrs = map[string]string{"email": pick(r, "a@x.test", "b@x.test", "c@x.test", "d@x.test", "e@x.test")}
		case x < 80:
			e.Action, e.Kind = "login_failed", "email"
			e.Subject = pick(r, "a@x.test", "b@x.test", "c@x.test")
		default:
			e.Action, e.Kind = "api_call", "user"
			e.Subject = pick(r, "u1", "u2", "u3")
		}
		e.TS = at
		switch x := r.IntN(100); {
		case x < 25:
			e.TS = at.Add(-time.Duration(r.IntN(2500)) * time.Millisecond)
		case x < 30:
			e.TS = at.Add(-time.Duration(10+r.IntN(60)) * time.Second)
		case x < 33:
			e.TS = at.Add(time.Duration(1+r.IntN(3)) * time.Second)
		}
		evs = append(evs, e)
	}
	return evs
}

// liveRun is the live path over one topic, in this process, on a clock
// the test drives.
type liveRun struct {
	brokers    []string
	rdb        *redis.Client
	store      *window.Store
	group      string
	topic      string
	decisions  string
	partitions int
	halt       func() error // stops the group once, and returns how it ended
	decW       *kafka.Writer
}

func startLive(t *testing.T, brokers []string, rdb *redis.Client, topic, decisions string, partitions int, set *rules.Set, now func() time.Time) *liveRun {
	t.Helper()
	store, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: func() int { return partitions }})
	if err != nil {
		t.Fatal(err)
	}
	l := &liveRun{brokers: brokers, rdb: rdb, store: store, group: "live-" + topic, topic: topic, decisions: decisions, partitions: partitions,
		decW: &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: decisions, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}}
	relay, err := live.NewRelay(live.RelayConfig{Store: store, Redis: rdb, Writer: l.decW, RetryBackoff: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	// Written through: the test waits on the stored offset, which a
	// write-back sink moves at checkpoints only, due by a clock the test holds.
	ap, err := live.NewApplier(store, live.ApplierConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := live.NewSink(live.SinkConfig{Applier: ap, Group: l.group, Rules: func() *rules.Set { return set }, Relay: relay, Now: now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	g, err := consume.NewGroup(consume.Config{Brokers: brokers, Topic: topic, GroupID: l.group, Now: now,
		FetchMaxWait: 100 * time.Millisecond, SessionTimeout: 6 * time.Second, Logger: quiet}, sink)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	l.halt = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		_ = l.halt()
		_ = l.decW.Close()
	})
	return l
}

// waitApplied waits until the live sink has applied every partition up to
// its end.
func (l *liveRun) waitApplied(t *testing.T, end []int64) {
	t.Helper()
	ctx := context.Background()
	for p := range l.partitions {
		stacktest.WaitFor(t, fmt.Sprintf("live to apply partition %d up to %d", p, end[p]), 60*time.Second, func() bool {
			next, _, err := l.store.Resume(ctx, l.group, l.topic, p)
			if err != nil {
				t.Fatal(err)
			}
			return next >= end[p]
		})
	}
}

// stop waits until the relay has published every decision, stops the
// live path and returns what it published (each decision once).
func (l *liveRun) stop(t *testing.T) []window.DecisionMessage {
	t.Helper()
	ctx := context.Background()
	keys := l.store.Keys()
	for p := range l.partitions {
		stacktest.WaitFor(t, fmt.Sprintf("the relay of partition %d to reach its change stream's sequence", p), 60*time.Second, func() bool {
			seq, err := l.rdb.Get(ctx, keys.Seq(p)).Result()
			if errors.Is(err, redis.Nil) {
				return true // no change entry: nothing to publish
			}
			cur, _ := l.rdb.Get(ctx, keys.Relay(p)).Result()
			_, cseq, _ := strings.Cut(cur, " ")
			return cseq == seq
		})
	}
	if err := l.halt(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("live group: %v", err)
	}
	return readDecisions(t, l.brokers, l.decisions)
}

// readDecisions reads a decisions topic whole, each id once.
func readDecisions(t *testing.T, brokers []string, topic string) []window.DecisionMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	f, err := consume.NewFetcher(consume.FetcherConfig{Client: client, Topic: topic, Offset: kafka.FirstOffset})
	if err != nil {
		t.Fatal(err)
	}
	_, end, err := f.Bounds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []window.DecisionMessage
	for f.Next() < end {
		msgs, err := f.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			var d window.DecisionMessage
			if err := json.Unmarshal(m.Value, &d); err != nil {
				t.Fatalf("decision %s: %v", m.Value, err)
			}
			if d.ID == "" {
				t.Fatalf("decision without an id: %s", m.Value)
			}
			if !seen[d.ID] {
				seen[d.ID] = true
				out = append(out, d)
			}
		}
	}
	return out
}
