package operator_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

const adminRules = `
rules:
  - name: short
    action: login_failed
    kinds: [ip]
    limits: [2/1m]
    message: short
  - name: long
    action: login_failed
    kinds: [ip]
    limits: [3/1h]
    message: long
`

// lastChange reads the newest entry of partition 0's change stream.
func lastChange(tb testing.TB, rdb *redis.Client, st *window.Store) window.Change {
	tb.Helper()
	ms, err := rdb.XRevRangeN(context.Background(), st.Keys().Log(0), "+", "-", 1).Result()
	if err != nil || len(ms) != 1 {
		tb.Fatalf("read change stream: %v %v", ms, err)
	}
	c, err := window.ParseChange(ms[0])
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// A ban is recorded, reaches the change stream, the snapshot, exact reads
// and takes (which it blocks with no counts at all); an unban removes it
// the same ways. Each action writes one entry with the next seq and an
// audit record naming the operator.
func TestBanAndUnbanOfASubjectWithNoCounts(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	ctx := context.Background()
	sub := window.Subject{Action: "login_failed", Kind: "ip", Subject: "203.0.113.9"}
	q := []window.EvalQuery{{Subject: sub, MaxWindow: time.Hour, Count: true,
		Limits: []window.EvalLimit{{Limit: rules.Limit{Count: 3, Window: time.Hour}, Block: true}}}}

	res, err := writerOf(t, st).Admin(ctx, base, operator.AdminRequest{Op: operator.OpBan, Subject: sub, Operator: "alice", Until: base.Add(time.Hour), Message: "abuse ticket 42"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Seq != 1 || res.Partition != 0 || res.EntryID == "" {
		t.Fatalf("ban result %+v", res)
	}
	c := lastChange(t, rdb, st)
	if c.Seq != 1 || c.Next != -1 || len(c.Bans) != 1 || c.Bans[0].Subject != sub || c.Bans[0].Ban == nil ||
		!c.Bans[0].Ban.Until.Equal(base.Add(time.Hour)) || c.Bans[0].Ban.Operator != "alice" || c.Bans[0].Ban.Message != "abuse ticket 42" {
		t.Fatalf("ban entry %+v", c)
	}
	if len(c.Decisions) != 1 || c.Decisions[0].Type != window.DecisionBan || c.Decisions[0].Operator != "alice" ||
		c.Decisions[0].Subject != sub.Subject || !c.Decisions[0].TS.Equal(base) || c.Decisions[0].Message != "abuse ticket 42" {
		t.Fatalf("ban audit %+v", c.Decisions)
	}
	snap, err := st.Snapshot(ctx, 0, base)
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := snap.Bans[sub]; !ok || b.Operator != "alice" || snap.Seq != 1 {
		t.Fatalf("snapshot bans %+v seq %d", snap.Bans, snap.Seq)
	}
	es, err := st.Evaluate(ctx, base.Add(time.Minute), q, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !es[0].Ban.InForce(base.Add(time.Minute)) || es[0].Sums[0] != 0 {
		t.Fatalf("evaluate of a banned subject: %+v", es[0])
	}
	tr, err := st.TakeSlot(ctx, 0, base.Add(time.Minute), []window.TakeRequest{{Queries: q, N: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if tr[0].Taken || tr[0].States[0].Ban == nil {
		t.Fatalf("take of a banned subject: %+v", tr[0])
	}
	// A ban ends on its own: nothing denies after Until.
	if es, _ := st.Evaluate(ctx, base.Add(time.Hour), q, 1); es[0].Ban != nil {
		t.Fatalf("ban still in force at its end: %+v", es[0].Ban)
	}

	res, err = writerOf(t, st).Admin(ctx, base.Add(2*time.Minute), operator.AdminRequest{Op: operator.OpUnban, Subject: sub, Operator: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Seq != 2 || !slices.Equal(res.Cleared, []string{"ban"}) {
		t.Fatalf("unban result %+v", res)
	}
	c = lastChange(t, rdb, st)
	if len(c.Bans) != 1 || c.Bans[0].Ban != nil || len(c.Decisions) != 1 || c.Decisions[0].Type != window.DecisionUnban ||
		c.Decisions[0].Operator != "bob" || !slices.Equal(c.Decisions[0].Cleared, []string{"ban"}) {
		t.Fatalf("unban entry %+v", c)
	}
	tr, err = st.TakeSlot(ctx, 0, base.Add(3*time.Minute), []window.TakeRequest{{Queries: q, N: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if !tr[0].Taken || tr[0].States[0].Ban != nil {
		t.Fatalf("take after unban: %+v", tr[0])
	}
	// An unban with nothing to clear is still recorded: the audit says who tried.
	if res, err = writerOf(t, st).Admin(ctx, base.Add(4*time.Minute), operator.AdminRequest{Op: operator.OpUnban, Subject: sub, Operator: "bob"}); err != nil || res.Seq != 3 || len(res.Cleared) != 0 {
		t.Fatalf("empty unban: %+v %v", res, err)
	}
}

// unban --rule clears only that rule's records and state limits; the
// subject's counts stay, so its next batch decides again.
func TestUnbanOfOneRule(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, adminRules)
	ctx := context.Background()
	sub := window.Subject{Action: "login_failed", Kind: "ip", Subject: "198.51.100.1"}
	b := &batcher{Topic: "events"}
	var evs []eventT
	for range 5 {
		evs = append(evs, ev(sub.Action, sub.Kind, sub.Subject, base))
	}
	if _, err := applierOf(t, st).Apply(ctx, "g", b.Batch(evs...), set, base, nil); err != nil {
		t.Fatal(err)
	}
	rec, err := st.Records(ctx, base, sub)
	if err != nil {
		t.Fatal(err)
	}
	// Both rules are over; the record is the one with the later until.
	if rec.Deny == nil || rec.Deny.Rule != "long" || !rec.Deny.Since.Equal(base) || rec.State == nil || len(rec.State.Limits) != 2 {
		t.Fatalf("records before: %+v", rec)
	}

	res, err := writerOf(t, st).Admin(ctx, base, operator.AdminRequest{Op: operator.OpUnban, Subject: sub, Operator: "alice", Rule: "short"})
	if err != nil {
		t.Fatal(err)
	}
	rec, err = st.Records(ctx, base, sub)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Cleared, []string{"state"}) || rec.Deny == nil || rec.State == nil || len(rec.State.Limits) != 1 || rec.State.Limits[0].Rule != "long" {
		t.Fatalf("after unban --rule short: %+v, records %+v", res, rec)
	}
	if c := lastChange(t, rdb, st); len(c.States) != 1 || c.States[0].State == nil || len(c.States[0].State.Limits) != 1 ||
		c.Decisions[0].Rule != "short" {
		t.Fatalf("entry of unban --rule short: %+v", c)
	}

	if res, err = writerOf(t, st).Admin(ctx, base, operator.AdminRequest{Op: operator.OpUnban, Subject: sub, Operator: "alice", Rule: "long"}); err != nil {
		t.Fatal(err)
	}
	rec, _ = st.Records(ctx, base, sub)
	if !slices.Equal(res.Cleared, []string{"deny", "state"}) || rec.Deny != nil || rec.State != nil {
		t.Fatalf("after unban --rule long: %+v, records %+v", res, rec)
	}
	if c := lastChange(t, rdb, st); len(c.States) != 1 || c.States[0].State != nil {
		t.Fatalf("entry of unban --rule long: %+v", c)
	}

	// The counts stayed: the next event evaluates the subject, which is over
	// both limits again.
	if _, err := applierOf(t, st).Apply(ctx, "g", b.Batch(ev(sub.Action, sub.Kind, sub.Subject, base.Add(time.Second))), set, base.Add(time.Second), nil); err != nil {
		t.Fatal(err)
	}
	if rec, _ = st.Records(ctx, base.Add(time.Second), sub); rec.Deny == nil || rec.Deny.Count != 6 || !rec.Deny.Since.Equal(base.Add(time.Second)) {
		t.Fatalf("next batch after unban: %+v", rec.Deny)
	}
}

// reset deletes every bucket a window can read, at every level, and
// records the live group's next offset as the boundary: events counted
// before it are gone, events after it are counted afresh, exactly.
func TestResetDeletesEveryBucket(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, `
rules:
  - name: daily
    action: login_failed
    kinds: [ip]
    limits: [3/1m, 1000/1d]
`)
	ctx := context.Background()
	sub := window.Subject{Action: "login_failed", Kind: "ip", Subject: "192.0.2.44"}
	other := window.Subject{Action: "login_failed", Kind: "ip", Subject: "192.0.2.45"}
	b := &batcher{Topic: "events"}
	now := base.Add(23 * time.Hour)
	var evs []eventT
	for _, ago := range []time.Duration{0, 30 * time.Second, 5 * time.Minute, 3 * time.Hour, 22 * time.Hour} {
		for range 2 {
			evs = append(evs, ev(sub.Action, sub.Kind, sub.Subject, now.Add(-ago)), ev(other.Action, other.Kind, other.Subject, now.Add(-ago)))
		}
	}
	if _, err := applierOf(t, st).Apply(ctx, "live", b.Batch(evs...), set, now, nil); err != nil {
		t.Fatal(err)
	}
	windows := []time.Duration{time.Minute, 24 * time.Hour}
	sums := func(at time.Time) [][]int64 {
		t.Helper()
		s, err := st.Check(ctx, at, []window.Query{{Subject: sub, Windows: windows}, {Subject: other, Windows: windows}})
		if err != nil {
			t.Fatal(err)
		}
		return [][]int64{s[0].Sums, s[1].Sums}
	}
	if got := sums(now); !slices.Equal(got[0], []int64{4, 10}) || !slices.Equal(got[1], []int64{4, 10}) {
		t.Fatalf("sums before reset: %v", got)
	}
	if rec, _ := st.Records(ctx, now, sub); rec.Deny == nil {
		t.Fatal("no deny record before reset")
	}

	res, err := writerOf(t, st).Admin(ctx, now, operator.AdminRequest{Op: operator.OpReset, Subject: sub, Operator: "alice", MaxWindow: 24 * time.Hour, Group: "live", Topic: "events"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Offset != b.Next || res.DeletedKeys < 5 || !slices.Contains(res.Cleared, "deny") || !slices.Contains(res.Cleared, "state") {
		t.Fatalf("reset result %+v (next offset %d)", res, b.Next)
	}
	if got := sums(now); !slices.Equal(got[0], []int64{0, 0}) || !slices.Equal(got[1], []int64{4, 10}) {
		t.Fatalf("sums after reset: %v (the other subject must keep its counts)", got)
	}
	keys, err := rdb.Keys(ctx, st.Keys().Slot(0)+":"+window.Field(sub)+":*").Result()
	if err != nil || len(keys) != 0 {
		t.Fatalf("keys of the reset subject left: %v %v", keys, err)
	}
	c := lastChange(t, rdb, st)
	if c.Next != b.Next || c.Decisions[0].Type != window.DecisionReset || c.Decisions[0].Offset != b.Next || c.Decisions[0].DeletedKeys != res.DeletedKeys {
		t.Fatalf("reset entry %+v", c)
	}

	// Events after the boundary are counted into fresh windows.
	if _, err := applierOf(t, st).Apply(ctx, "live", b.Batch(ev(sub.Action, sub.Kind, sub.Subject, now)), set, now, nil); err != nil {
		t.Fatal(err)
	}
	if got := sums(now); !slices.Equal(got[0], []int64{1, 1}) {
		t.Fatalf("sums after reset and one event: %v", got)
	}
}

// A subject's field must name it back; writes need an operator; a reset
// names no rule.
func TestAdminRefusesBadRequests(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	sub := window.Subject{Action: "a", Kind: "ip", Subject: "192.0.2.1"}
	for name, req := range map[string]operator.AdminRequest{
		"colon in kind":   {Op: operator.OpUnban, Subject: window.Subject{Action: "a", Kind: "i:p", Subject: "x"}, Operator: "o"},
		"no operator":     {Op: operator.OpUnban, Subject: sub},
		"ban in the past": {Op: operator.OpBan, Subject: sub, Operator: "o", Until: base.Add(-time.Second)},
		"reset of a rule": {Op: operator.OpReset, Subject: sub, Operator: "o", Rule: "r", MaxWindow: time.Minute},
		"reset no window": {Op: operator.OpReset, Subject: sub, Operator: "o"},
		"unknown op":      {Op: "nuke", Subject: sub, Operator: "o"},
	} {
		if _, err := writerOf(t, st).Admin(context.Background(), base, req); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// With bucket and distinct rules: unban of one rule keeps the other's part
// of the state (limits and buckets alike); reset deletes the arrival times
// and the distinct sets too.
func TestUnbanAndResetOfBucketAndDistinctRules(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, `
rules:
  - name: stuffing
    action: login_failed
    kinds: [ip]
    distinct: email
    limits: [3/1h]
  - name: burst
    action: login_failed
    kinds: [ip]
    bucket: {rate: 1/1m, burst: 2}
`)
	ctx := context.Background()
	sub := window.Subject{Action: "login_failed", Kind: "ip", Subject: "198.51.100.7"}
	b := &batcher{Topic: "events"}
	var evs []eventT
	for i := range 5 {
		e := ev(sub.Action, sub.Kind, sub.Subject, base)
		e.Attrs = map[string]string{"email": "u" + jsInt(int64(i)) + "@example.com"}
		evs = append(evs, e)
	}
	if _, err := applierOf(t, st).Apply(ctx, "live", b.Batch(evs...), set, base, nil); err != nil {
		t.Fatal(err)
	}
	rec, err := st.Records(ctx, base, sub)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Deny == nil || rec.State == nil || len(rec.State.Limits) != 1 || len(rec.State.Buckets) != 1 {
		t.Fatalf("records before: deny %+v state %+v", rec.Deny, rec.State)
	}
	if _, err := writerOf(t, st).Admin(ctx, base, operator.AdminRequest{Op: operator.OpUnban, Subject: sub, Operator: "alice", Rule: "stuffing"}); err != nil {
		t.Fatal(err)
	}
	if rec, _ = st.Records(ctx, base, sub); rec.State == nil || len(rec.State.Limits) != 0 || len(rec.State.Buckets) != 1 || rec.State.Buckets[0].Rule != "burst" {
		t.Fatalf("state after unban --rule stuffing: %+v", rec.State)
	}
	keys := []string{st.Keys().Arrivals(0, sub), st.Keys().Distinct(0, sub, "email")}
	if n, err := rdb.Exists(ctx, keys...).Result(); err != nil || n != 2 {
		t.Fatalf("arrival times and distinct set before reset: %d %v", n, err)
	}
	res, err := writerOf(t, st).Admin(ctx, base, operator.AdminRequest{Op: operator.OpReset, Subject: sub, Operator: "alice", MaxWindow: set.MaxWindowFor(sub.Action, sub.Kind), Distinct: []string{"email"}})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, keys...).Result(); err != nil || n != 0 || res.DeletedKeys < 3 {
		t.Fatalf("after reset: %d keys left (%v), %d deleted", n, err, res.DeletedKeys)
	}
	if rec, _ = st.Records(ctx, base, sub); rec.Deny != nil || rec.State != nil {
		t.Fatalf("records after reset: %+v", rec)
	}
}

func jsInt(n int64) string { b, _ := json.Marshal(n); return string(b) }
