package backtest_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/backtest"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// retentionRules mix what minute buckets can answer (windows of a minute
// or more) with what they cannot: a 2/s limit, a token bucket, a distinct
// count.
const retentionRules = `
rules:
  - name: login
    action: login_failed
    kinds: [ip]
    limits: [2/s, 5/m]
  - name: signup
    action: signup
    kinds: [ip]
    limits: [4/10m]
  - name: api
    action: api_call
    kinds: [user]
    bucket: {rate: 1/s, burst: 5}
  - name: stuffing
    action: login_failed
    kinds: [ip]
    distinct: email
    limits: [3/5m]
`

// minuteRules are what a backtest from history keeps of retentionRules,
// written out independently for the reference.
const minuteRules = `
rules:
  - name: login
    action: login_failed
    kinds: [ip]
    limits: [5/m]
  - name: signup
    action: signup
    kinds: [ip]
    limits: [4/10m]
`

// TestRetentionRefusedThenFromHistory: a topic whose first partition lost
// its first records (as retention would delete them) no longer holds what
// a backtest of the range needs: the backtest says so and stops. With
// FromHistory it replays the minute buckets the history sink wrote of the
// same events instead, keeps the limits of a minute or more (and says what
// it left out), and finds what an exact sliding log finds with every event
// at its minute's start. A minute tier the roller already emptied is
// refused in turn.
func TestRetentionRefusedThenFromHistory(t *testing.T) {
	brokers := stacktest.Brokers(t)
	pool := historytest.Pool(t)
	topic := stacktest.Topic(t, brokers, 2)
	set := mustRules(t, retentionRules)

	r := rand.New(rand.NewPCG(14, 3))
	start := time.Now().Add(-90 * time.Minute).Truncate(time.Minute)
	evs := retentionStream(r, start, 40*time.Minute)
	s := newStream(t, brokers, topic, 2)
	s.publish(t, time.Time{}, evs...)
	writeHistory(t, pool, topic, evs, 2)

	// Partition 0 keeps only what came from minute 20 on.
	var deleted int64
	for _, e := range evs {
		if window.Partition(window.Subject{Action: e.Action, Kind: e.Kind, Subject: e.Subject}, 2) == 0 && e.TS.Before(start.Add(20*time.Minute)) {
			deleted++
		}
	}
	stacktest.DeleteRecords(t, brokers, topic, 0, deleted)

	from, to := start.Add(30*time.Minute), start.Add(40*time.Minute)
	cfg := backtest.Config{Rules: set, From: from, To: to, Brokers: brokers, Topic: topic, RedisServer: stacktest.RedisServer(t)}
	_, err := backtest.Run(context.Background(), cfg)
	var re *backtest.RetentionError
	if !errors.As(err, &re) || re.Partition != 0 || re.Deleted != deleted || !re.Need.Equal(start.Add(10*time.Minute)) ||
		!strings.Contains(err.Error(), "--from-history") {
		t.Fatalf("backtest over a topic that lost its head: %v, want a retention error for partition 0 (deleted %d, needed from minute 10)", err, deleted)
	}
	t.Logf("refused: %v", err)

	cfg.FromHistory, cfg.History = true, pool
	rep, err := backtest.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Source != "history" || rep.Precision != backtest.HistoryPrecision || !strings.Contains(rep.Retention, "partition 0") {
		t.Fatalf("report source %q precision %q retention %q: want history, its precision and why", rep.Source, rep.Precision, rep.Retention)
	}
	wantDropped := []string{
		"rule api: bucket {rate: 1/1s, burst: 5} left out (a token bucket needs each event's time)",
		"rule login: limit 2/1s left out (shorter than a minute)",
		"rule stuffing: left out (distinct email: history keeps no values)",
	}
	if got := slices.Sorted(slices.Values(rep.Dropped)); !slices.Equal(got, wantDropped) {
		t.Fatalf("dropped %q, want %q", got, wantDropped)
	}
	atMinutes := make([]event.Event, len(evs))
	for i, e := range evs {
		e.TS = e.TS.Truncate(time.Minute)
		atMinutes[i] = e
	}
	want := reference(atMinutes, mustRules(t, minuteRules), from, to)
	if len(want) < 5 {
		t.Fatalf("the reference denies %d subjects: too few to compare", len(want))
	}
	compareKeys(t, "denies from history", denyLines(rep.Candidate), want)
	t.Logf("from history: %d minute rows, %d denies as the reference", rep.Messages, len(want))

	// The roller moved minutes before minute 15 to 5-minute buckets: the
	// minute tier no longer holds the warm-up.
	if _, err := pool.Exec(context.Background(), `UPDATE floodgate.history_tiers SET rolled_to = $1 WHERE step = '1m'`, start.Add(15*time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, err = backtest.Run(context.Background(), cfg)
	var he *backtest.HistoryError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "minute buckets only from "+start.Add(15*time.Minute).UTC().Format(time.RFC3339)) {
		t.Fatalf("backtest from a rolled minute tier: %v, want a history error", err)
	}
}

// retentionStream is d of failed logins (with the e-mail tried), signups
// and API calls from start, in time order.
func retentionStream(r *rand.Rand, start time.Time, d time.Duration) []event.Event {
	var evs []event.Event
	for sec := time.Duration(0); sec < d; sec += time.Second {
		var batch []event.Event
		add := func(action, kind, subject string, attrs map[string]string) {
			ts := start.Add(sec + time.Duration(r.IntN(1000))*time.Millisecond)
			batch = append(batch, event.Event{V: 1, ID: event.NewID(), Action: action, Kind: kind, Subject: subject, TS: ts, N: 1, Attrs: attrs})
		}
		for _, ip := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"} {
			if r.Float64() < 0.04 {
				for range 1 + r.IntN(3) {
					add("login_failed", "ip", ip, map[string]string{"email": pick(r, "a@x.test", "b@x.test", "c@x.test", "d@x.test")})
				}
			}
		}
		for _, ip := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3"} {
			if r.Float64() < 0.008 {
				add("signup", "ip", ip, nil)
			}
		}
		if r.Float64() < 0.1 {
			add("api_call", "user", pick(r, "u1", "u2"), nil)
		}
		slices.SortFunc(batch, func(a, b event.Event) int { return a.TS.Compare(b.TS) })
		evs = append(evs, batch...)
	}
	return evs
}

// writeHistory applies evs to a history sink as the history
// group would have read them from the topic: per partition, in order.
func writeHistory(t *testing.T, pool history.DB, topic string, evs []event.Event, partitions int) {
	t.Helper()
	ctx := context.Background()
	sink, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: "history-" + topic})
	if err != nil {
		t.Fatal(err)
	}
	batches := make([]consume.Batch, partitions)
	for p := range batches {
		batches[p] = consume.Batch{Topic: topic, Partition: p}
	}
	for _, e := range evs {
		p := window.Partition(window.Subject{Action: e.Action, Kind: e.Kind, Subject: e.Subject}, partitions)
		b := &batches[p]
		b.Records = append(b.Records, consume.Record{Offset: int64(len(b.Records)), Event: e})
	}
	for _, b := range batches {
		if len(b.Records) == 0 {
			continue
		}
		b.First, b.Last = 0, int64(len(b.Records)-1)
		if err := sink.Apply(ctx, b); err != nil {
			t.Fatalf("history sink partition %d: %v", b.Partition, err)
		}
	}
}
