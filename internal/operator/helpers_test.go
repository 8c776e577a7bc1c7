package operator_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/feed"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/strict"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// testRules: a rule with an allowlist, a shadow rule and a strict rule.
const testRules = `
rules:
  - name: login-failed
    action: login_failed
    kinds: [ip, email]
    limits: [5/1m, 20/1h]
    message: Too many failed logins.
    allow: [ops@example.com]
    overrides:
      - plan: partner
        scale: 4
  - name: visit
    action: visit
    kinds: [ip]
    limits: [3/1m]
    shadow: true
  - name: reset-mail
    action: password_reset
    kinds: [email]
    limits: [3/1h]
    strict: true
plans:
  ip: {198.51.100.9: partner}
`

// testPartitions spreads subjects over several slots (several nodes of a
// Redis Cluster).
const testPartitions = 4

// client is a single Redis or a cluster client.
type client interface {
	window.Redis
	feed.Streams
}

// env is a limiter answering from memory kept by Sync, as `floodgate
// limiter` runs it, with an Operator over the same store; apply counts
// events through the aggregator's write path.
type env struct {
	store *window.Store
	ap    *live.Applier
	set   *rules.Set
	state *decide.State
	lim   *decide.Limiter
	op    *operator.Operator
	offs  map[int]int64
}

func newEnv(tb testing.TB, rdb client, prefix string) *env {
	tb.Helper()
	set, err := rules.Parse([]byte(testRules))
	if err != nil {
		tb.Fatal(err)
	}
	parts := func() int { return testPartitions }
	store, err := window.NewStore(rdb, window.StoreConfig{Prefix: prefix, Partitions: parts})
	if err != nil {
		tb.Fatal(err)
	}
	ap, err := live.NewApplier(store, live.ApplierConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	e := &env{store: store, ap: ap, set: set, state: decide.NewState(), offs: map[int]int64{}}
	taker, err := strict.New(strict.Config{Store: store})
	if err != nil {
		tb.Fatal(err)
	}
	rulesFn := func() *rules.Set { return e.set }
	e.lim, err = decide.New(decide.Config{Store: store, Taker: taker, State: e.state, Partitions: parts, Rules: rulesFn, Timeout: 5 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	writer, err := operator.NewWriter(store)
	if err != nil {
		tb.Fatal(err)
	}
	e.op, err = operator.New(operator.Config{Store: store, Writer: writer, Rules: rulesFn, Checker: e.lim, Applied: e.state.Seq, Group: "live", Topic: "events"})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- decide.Sync(ctx, decide.SyncConfig{State: e.state, Source: store, Streams: rdb, Partitions: parts})
	}()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	})
	waitFor(tb, "the limiter's memory to load", func() bool { return e.lim.Ready(context.Background()) == nil })
	return e
}

// waitFor waits for cond (stacktest.WaitFor) at most 30 s.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	stacktest.WaitFor(tb, what, 30*time.Second, cond)
}

// apply counts n events of a subject at ts as the aggregator does (one
// batch of its partition, group "live", topic "events") and waits until the
// limiter's memory has the batch's changes.
func (e *env) apply(tb testing.TB, action, kind, subject string, n int, ts time.Time) {
	tb.Helper()
	sub := window.Subject{Action: action, Kind: kind, Subject: subject}
	p := window.Partition(sub, testPartitions)
	b := consume.Batch{Topic: "events", Partition: p, First: e.offs[p]}
	for range n {
		ev := event.Event{V: 1, ID: event.NewID(), Action: action, Kind: kind, Subject: subject, TS: ts, N: 1}
		b.Records = append(b.Records, consume.Record{Offset: e.offs[p], Event: ev})
		e.offs[p]++
	}
	b.Last = e.offs[p] - 1
	res, err := e.ap.Apply(context.Background(), "live", b, e.set, ts, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if res.Changes > 0 {
		waitFor(tb, "the memory to catch up", func() bool { return e.state.Seq(p) >= res.Changes })
	}
}

func req(action string, subs ...string) operator.Request {
	r := operator.Request{Action: action, Operator: "alice"}
	for i := 0; i+1 < len(subs); i += 2 {
		r.Subjects = append(r.Subjects, limitapi.Subject{Kind: subs[i], Subject: subs[i+1]})
	}
	return r
}

// decide runs a check (memory or exact) or a take of one subject.
func (e *env) decide(tb testing.TB, how, action, kind, subject string) limitapi.Decision {
	tb.Helper()
	r := limitapi.Request{Action: action, Subjects: []limitapi.Subject{{Kind: kind, Subject: subject}}, Exact: how == "exact"}
	var d limitapi.Decision
	var err error
	if how == "take" {
		d, err = e.lim.Take(context.Background(), r)
	} else {
		d, err = e.lim.Check(context.Background(), r)
	}
	if err != nil {
		tb.Fatalf("%s %s %s=%s: %v", how, action, kind, subject, err)
	}
	return d
}

func itoa(i int) string { return strconv.Itoa(i) }

// partitionOf is the partition of a request's first subject.
func partitionOf(r operator.Request) int {
	s := r.Subjects[0]
	return window.Partition(window.Subject{Action: r.Action, Kind: s.Kind, Subject: s.Subject}, testPartitions)
}
