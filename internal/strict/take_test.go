package strict_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/strict"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// partitions spreads the tests' subjects over several slots, so takes of
// several subjects cross slots.
const partitions = 12

// fixture is a window store over the stack's Redis, with a key prefix of
// its own deleted at the end of the test, and a Taker over it.
type fixture struct {
	*window.Store
	taker *strict.Taker
}

func (f fixture) Take(ctx context.Context, now time.Time, qs []window.EvalQuery, n int64) (bool, []window.EvalState, error) {
	return f.taker.Take(ctx, now, qs, n)
}

// denyKey is the key of sub's deny record in its slot.
func (f fixture) denyKey(sub window.Subject) string {
	return f.Keys().Deny(window.Partition(sub, partitions), sub)
}

// takeAtOnce runs callers takes of one each of qs concurrently and returns
// how many were admitted.
func (f fixture) takeAtOnce(t *testing.T, now time.Time, qs []window.EvalQuery, callers int) int64 {
	t.Helper()
	var taken atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			ok, _, err := f.Take(context.Background(), now, qs, 1)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				taken.Add(1)
			}
		})
	}
	wg.Wait()
	return taken.Load()
}

func takeStore(tb testing.TB) (fixture, *redis.Client) {
	tb.Helper()
	stacktest.Redis(tb) // Redis answers, or the test fails (skips under -short)
	rdb := redis.NewClient(&redis.Options{Addr: stacktest.RedisAddr(), PoolSize: 64, MaxRetries: -1})
	tb.Cleanup(func() {
		if err := rdb.Close(); err != nil {
			tb.Error(err)
		}
	})
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(tb, rdb), Partitions: func() int { return partitions }})
	if err != nil {
		tb.Fatal(err)
	}
	taker, err := strict.New(strict.Config{Store: st})
	if err != nil {
		tb.Fatal(err)
	}
	return fixture{Store: st, taker: taker}, rdb
}

func TestTakeConcurrentAdmitsExactlyTheLimit(t *testing.T) {
	st, _ := takeStore(t)
	now := time.Unix(1_800_000_000, 500_000_000)
	sub := window.Subject{Action: "password_reset", Kind: "email", Subject: "a@example.com"}
	q := []window.EvalQuery{{
		Subject:   sub,
		MaxWindow: time.Hour,
		Limits: []window.EvalLimit{
			{Limit: rules.Limit{Count: 7, Window: time.Minute}, Block: true},
			{Limit: rules.Limit{Count: 20, Window: time.Hour}, Block: true},
		},
		Count: true,
	}}
	if got := st.takeAtOnce(t, now, q, 200); got != 7 {
		t.Fatalf("taken %d of 200, want exactly 7", got)
	}
	// The aggregator's Check reads the same buckets.
	states, err := st.Check(context.Background(), now, []window.Query{{Subject: sub, Windows: []time.Duration{time.Minute, time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	if states[0].Sums[0] != 7 || states[0].Sums[1] != 7 {
		t.Fatalf("Check sums %v, want [7 7]", states[0].Sums)
	}
	// One more is refused, and Evaluate says when it fits: all 7 events are
	// in second now, so the minute window has room at now+60s.
	ev, err := st.Evaluate(context.Background(), now, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := time.Unix(now.Unix()+60, 0).UTC()
	if ev[0].Sums[0] != 7 || !ev[0].Until[0].Equal(want) || !ev[0].Until[1].IsZero() {
		t.Fatalf("Evaluate = sums %v until %v, want sums [7 7] until [%v 0]", ev[0].Sums, ev[0].Until, want)
	}
	later := now.Add(61 * time.Second)
	ok, _, err := st.Take(context.Background(), later, q, 1)
	if err != nil || !ok {
		t.Fatalf("take after the minute: taken=%v err=%v, want taken", ok, err)
	}
}

func TestTakeIsAllOrNothingAcrossSubjects(t *testing.T) {
	st, _ := takeStore(t)
	now := time.Unix(1_800_000_100, 0)
	lim := []window.EvalLimit{{Limit: rules.Limit{Count: 1, Window: time.Minute}, Block: true}}
	email := window.EvalQuery{Subject: window.Subject{Action: "reset", Kind: "email", Subject: "b@example.com"}, MaxWindow: time.Minute, Limits: lim, Count: true}
	ip := window.EvalQuery{Subject: window.Subject{Action: "reset", Kind: "ip", Subject: "192.0.2.1"}, MaxWindow: time.Minute, Limits: lim, Count: true}
	if ok, _, err := st.Take(context.Background(), now, []window.EvalQuery{email}, 1); err != nil || !ok {
		t.Fatalf("first take: %v %v", ok, err)
	}
	ok, states, err := st.Take(context.Background(), now, []window.EvalQuery{ip, email}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Fatal("take with a full email subject was taken")
	}
	if states[0].Sums[0] != 0 || states[1].Sums[0] != 1 {
		t.Fatalf("sums %v %v, want 0 and 1", states[0].Sums, states[1].Sums)
	}
	ev, err := st.Evaluate(context.Background(), now, []window.EvalQuery{ip}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ev[0].Sums[0] != 0 {
		t.Fatalf("ip counted %d by a refused take", ev[0].Sums[0])
	}
}

func TestTakeBlockedByDenyRecord(t *testing.T) {
	st, rdb := takeStore(t)
	now := time.Unix(1_800_000_200, 0)
	sub := window.Subject{Action: "login_failed", Kind: "ip", Subject: "198.51.100.9"}
	rec := window.Deny{Rule: "login-failed", Limit: rules.Limit{Count: 5, Window: time.Minute}, Count: 6, Until: now.Add(30 * time.Second), Message: "slow down"}
	js, err := rec.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(context.Background(), st.denyKey(sub), js, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	q := window.EvalQuery{Subject: sub, MaxWindow: time.Minute, Limits: []window.EvalLimit{{Limit: rules.Limit{Count: 100, Window: time.Minute}, Block: true}}, Count: true}
	for _, tc := range []struct {
		block []string
		want  bool
	}{{[]string{"login-failed"}, false}, {[]string{"other"}, true}, {nil, true}} {
		q.BlockRules = tc.block
		ok, states, err := st.Take(context.Background(), now, []window.EvalQuery{q}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if ok != tc.want {
			t.Errorf("block rules %v: taken %v, want %v", tc.block, ok, tc.want)
		}
		if states[0].Deny == nil || states[0].Deny.Rule != "login-failed" {
			t.Errorf("deny record not returned: %+v", states[0].Deny)
		}
	}
}

// Takes run in arrival order, not clock order: a take stamped one second
// earlier than the takes that filled the limit must still be refused.
func TestTakeCountsEventsAheadOfItsClock(t *testing.T) {
	st, _ := takeStore(t)
	now := time.Unix(1_800_000_359, 900_000_000) // a minute boundary follows
	q := []window.EvalQuery{{
		Subject:   window.Subject{Action: "reset", Kind: "email", Subject: "skew@example.com"},
		MaxWindow: time.Minute,
		Limits:    []window.EvalLimit{{Limit: rules.Limit{Count: 3, Window: time.Minute}, Block: true}},
		Count:     true,
	}}
	later := now.Add(2 * time.Second)
	for i := range 3 {
		if ok, _, err := st.Take(context.Background(), later, q, 1); err != nil || !ok {
			t.Fatalf("take %d: %v %v", i, ok, err)
		}
	}
	ok, states, err := st.Take(context.Background(), now, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ok || states[0].Sums[0] != 3 {
		t.Fatalf("take behind the clock: taken=%v sums=%v, want refused with 3", ok, states[0].Sums)
	}
	// Beyond Ahead, the events are not counted (they are in another window).
	ok, _, err = st.Take(context.Background(), later.Add(-window.Ahead-time.Second), q, 1)
	if err != nil || !ok {
		t.Fatalf("take more than Ahead behind: taken=%v err=%v, want taken", ok, err)
	}
}

// A subject in two queries of one take is counted once: every row checks
// sum+n against the limit, so counting n per row would overshoot.
func TestTakeDuplicateSubjectCountedOnce(t *testing.T) {
	st, _ := takeStore(t)
	now := time.Unix(1_800_001_000, 0)
	q := window.EvalQuery{
		Subject:   window.Subject{Action: "reset", Kind: "ip", Subject: "192.0.2.50"},
		MaxWindow: time.Minute,
		Limits:    []window.EvalLimit{{Limit: rules.Limit{Count: 5, Window: time.Minute}, Block: true}},
		Count:     true,
	}
	admitted := 0
	for range 10 {
		ok, _, err := st.Take(context.Background(), now, []window.EvalQuery{q, q}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		}
	}
	ev, err := st.Evaluate(context.Background(), now, []window.EvalQuery{q}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if admitted != 5 || ev[0].Sums[0] != 5 {
		t.Fatalf("admitted %d takes, window sum %d; want 5 and 5 (limit 5/1m)", admitted, ev[0].Sums[0])
	}
}

// When the excess lies in the seconds ahead of now, the retry time is when
// those events leave the window, and a take then succeeds; a second earlier
// it does not.
func TestUntilCountsEventsAhead(t *testing.T) {
	st, _ := takeStore(t)
	now := time.Unix(1_800_002_000, 0)
	q := []window.EvalQuery{{
		Subject:   window.Subject{Action: "reset", Kind: "ip", Subject: "192.0.2.51"},
		MaxWindow: time.Minute,
		Limits:    []window.EvalLimit{{Limit: rules.Limit{Count: 3, Window: time.Minute}, Block: true}},
		Count:     true,
	}}
	later := now.Add(4 * time.Second)
	for range 3 {
		if ok, _, err := st.Take(context.Background(), later, q, 1); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	ev, err := st.Evaluate(context.Background(), now, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := later.Add(time.Minute)
	if ev[0].Sums[0] != 3 || !ev[0].Until[0].Equal(want) {
		t.Fatalf("evaluate at now: sum %d until %s, want 3 and %s", ev[0].Sums[0], ev[0].Until[0], want)
	}
	if ok, _, err := st.Take(context.Background(), want.Add(-time.Second), q, 1); err != nil || ok {
		t.Fatalf("take a second before the retry time: taken=%v err=%v, want refused", ok, err)
	}
	if ok, _, err := st.Take(context.Background(), want, q, 1); err != nil || !ok {
		t.Fatalf("take at the retry time: taken=%v err=%v, want taken", ok, err)
	}
}

// subjectsInTwoSlots returns an email and an IP whose slots differ.
func subjectsInTwoSlots(t *testing.T) (email, ip window.Subject) {
	t.Helper()
	email = window.Subject{Action: "reset", Kind: "email", Subject: "cross@example.com"}
	for i := range 256 {
		ip = window.Subject{Action: "reset", Kind: "ip", Subject: "198.51.100." + strconv.Itoa(i)}
		if window.Partition(ip, partitions) != window.Partition(email, partitions) {
			return email, ip
		}
	}
	t.Fatal("no IP outside the email's slot")
	return
}

// Concurrent takes of two subjects in different slots, each with its own
// limit: every take reserves in both slots and refunds where the other
// refused. Exactly the smaller limit is admitted, and both subjects'
// counts equal the admitted takes (no reservation left behind).
func TestTakeAcrossSlotsAdmitsExactlyTheLimit(t *testing.T) {
	st, _ := takeStore(t)
	now := time.Unix(1_800_000_300, 0)
	email, ip := subjectsInTwoSlots(t)
	qs := []window.EvalQuery{
		{Subject: email, MaxWindow: time.Hour, Count: true, BlockRules: []string{"e"},
			Limits: []window.EvalLimit{{Limit: rules.Limit{Count: 9, Window: time.Hour}, Block: true}}},
		{Subject: ip, MaxWindow: time.Hour, Count: true, BlockRules: []string{"i"},
			Limits: []window.EvalLimit{{Limit: rules.Limit{Count: 5, Window: time.Minute}, Block: true}}},
	}
	if got := st.takeAtOnce(t, now, qs, 100); got != 5 {
		t.Fatalf("taken %d of 100, want exactly 5 (the IP's limit)", got)
	}
	states, err := st.Check(context.Background(), now, []window.Query{
		{Subject: email, Windows: []time.Duration{time.Hour}}, {Subject: ip, Windows: []time.Duration{time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	if states[0].Sums[0] != 5 || states[1].Sums[0] != 5 {
		t.Fatalf("counts email=%d ip=%d, want 5 and 5 (refused reservations refunded)", states[0].Sums[0], states[1].Sums[0])
	}
}

// Concurrent takes of a bucket rule admit exactly what the bucket holds:
// the burst at once, then one per interval; the arrival time the store
// keeps matches the reference GCRA.
func TestTakeBucketAdmitsExactlyTheBurst(t *testing.T) {
	st, _ := takeStore(t)
	now := time.Unix(1_800_000_400, 250_000_000)
	b := rules.Bucket{Rate: rules.Limit{Count: 4, Window: time.Second}, Burst: 6}
	sub := window.Subject{Action: "api", Kind: "user", Subject: "burst"}
	q := []window.EvalQuery{{Subject: sub, MaxWindow: 2 * time.Second, Count: true, BlockRules: []string{"api"},
		Buckets: []window.EvalBucket{{Rule: "api", Bucket: b, Block: true}}}}
	if got := st.takeAtOnce(t, now, q, 50); got != 6 {
		t.Fatalf("taken %d of 50 at once, want the burst of 6", got)
	}
	// The next fits one interval (250ms) after the sixth's arrival time
	// left the burst: at now + 250ms exactly.
	ev, err := st.Evaluate(context.Background(), now, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	interval := b.Interval()
	wantTAT := now.Truncate(time.Millisecond).Add(6 * interval)
	if got := ev[0].Buckets[0]; !got.TAT.Equal(wantTAT) || !got.Until.Equal(wantTAT.Add(interval-6*interval)) {
		t.Fatalf("bucket %+v, want arrival time %s and the next at %s", got, wantTAT, wantTAT.Add(-5*interval))
	}
	if ok, _, err := st.Take(context.Background(), now.Add(interval-time.Millisecond), q, 1); err != nil || ok {
		t.Fatalf("take 1ms before the next token: %v %v", ok, err)
	}
	if ok, _, err := st.Take(context.Background(), now.Add(interval), q, 1); err != nil || !ok {
		t.Fatalf("take when the next token is in: %v %v", ok, err)
	}
	// n > what the bucket holds now is refused whole; n == burst after it
	// refilled is admitted.
	if ok, _, err := st.Take(context.Background(), now.Add(interval), q, 2); err != nil || ok {
		t.Fatalf("take 2 with none left: %v %v", ok, err)
	}
	if ok, _, err := st.Take(context.Background(), now.Add(10*time.Second), q, 6); err != nil || !ok {
		t.Fatalf("take the whole burst after a refill: %v %v", ok, err)
	}
}

// A distinct limit: takes naming new e-mails are admitted up to the limit,
// and one naming an e-mail the window saw already costs nothing, even at
// the limit.
func TestTakeDistinctCountsNewValuesOnly(t *testing.T) {
	st, _ := takeStore(t)
	now := time.Unix(1_800_000_500, 0)
	ip := window.Subject{Action: "signup", Kind: "ip", Subject: "203.0.113.60"}
	q := func(email string) []window.EvalQuery {
		return []window.EvalQuery{{Subject: ip, MaxWindow: time.Hour, Count: true, BlockRules: []string{"many"},
			Limits: []window.EvalLimit{{Limit: rules.Limit{Count: 3, Window: time.Hour}, Distinct: "email", Block: true}},
			Values: map[string]string{"email": email}}}
	}
	for i, email := range []string{"a@x", "b@x", "a@x", "c@x", "c@x"} {
		ok, _, err := st.Take(context.Background(), now, q(email), 1)
		if err != nil || !ok {
			t.Fatalf("take %d (%s): %v %v, want taken", i, email, ok, err)
		}
	}
	ok, states, err := st.Take(context.Background(), now, q("d@x"), 1)
	if err != nil || ok {
		t.Fatalf("a fourth e-mail: %v %v, want refused", ok, err)
	}
	if states[0].Sums[0] != 3 || states[0].Until[0] != time.Unix(now.Unix()+3600, 0).UTC() {
		t.Fatalf("state %+v, want 3 distinct and a retry when the first leaves the hour", states[0])
	}
	if ok, _, err := st.Take(context.Background(), now, q("b@x"), 1); err != nil || !ok {
		t.Fatalf("a known e-mail: %v %v, want taken", ok, err)
	}
}

// A take of one slot queues its events in the slot's take stream with the
// count, in the same script run: a refused take queues nothing, and a full
// stream leaves the events to the caller.
func TestTakeQueuesItsEventsInItsSlot(t *testing.T) {
	stacktest.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: stacktest.RedisAddr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: func() int { return partitions }, MaxTakes: 3})
	if err != nil {
		t.Fatal(err)
	}
	taker, err := strict.New(strict.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_200, 0)
	lim := []window.EvalLimit{{Limit: rules.Limit{Count: 2, Window: time.Minute}, Block: true}}
	email := window.EvalQuery{Subject: window.Subject{Action: "reset", Kind: "email", Subject: "q@example.com"}, MaxWindow: time.Minute, Limits: lim, Count: true}
	part := window.Partition(email.Subject, partitions)
	ev := func(i int) []window.QueuedEvent {
		return []window.QueuedEvent{{Key: []byte("email:q@example.com"), Value: []byte(`{"n":` + strconv.Itoa(i) + `}`)}}
	}
	stream := func() []string { return takeStream(t, rdb, st, part) }
	for i := range 3 {
		taken, queued, _, err := taker.TakeQueued(context.Background(), now, []window.EvalQuery{email}, 1, ev(i))
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 2; taken != want || all(queued) != want {
			t.Fatalf("take %d: taken %v queued %v, want %v (limit 2)", i, taken, queued, want)
		}
	}
	if got := stream(); len(got) != 2 || got[0] != `email:q@example.com {"n":0}` || got[1] != `email:q@example.com {"n":1}` {
		t.Fatalf("take stream %q, want the two taken events in order", got)
	}

	// A full stream (MaxTakes 3) takes but leaves the events to the caller.
	email.Subject.Subject = "q@example.com"
	email.Limits = []window.EvalLimit{{Limit: rules.Limit{Count: 10, Window: time.Minute}, Block: true}}
	for i, want := range []bool{true, false} {
		taken, queued, _, err := taker.TakeQueued(context.Background(), now, []window.EvalQuery{email}, 1, ev(10+i))
		if err != nil || !taken || all(queued) != want {
			t.Fatalf("take %d near the cap: taken %v queued %v err %v, want taken, queued %v", i, taken, queued, err, want)
		}
	}
	if got := stream(); len(got) != 3 {
		t.Fatalf("take stream holds %d events, want the cap, 3", len(got))
	}
}

// all reports whether every event was queued (none: false).
func all(queued []bool) bool {
	for _, q := range queued {
		if !q {
			return false
		}
	}
	return len(queued) > 0
}

// A take spanning slots queues each slot's events in that slot's stream as
// it reserves there. A refund takes the entry back with the count; once the
// relay has reached the entry, the refund keeps both: counts and history
// agree either way.
func TestTakeAcrossSlotsQueuesEventsWithTheirCounts(t *testing.T) {
	f, rdb := takeStore(t)
	st, taker := f.Store, f.taker
	ctx := context.Background()
	now := time.Unix(1_800_000_200, 0)
	lim := []window.EvalLimit{{Limit: rules.Limit{Count: 2, Window: time.Minute}, Block: true}}
	q := func(kind, s string) window.EvalQuery {
		return window.EvalQuery{Subject: window.Subject{Action: "reset", Kind: kind, Subject: s}, MaxWindow: time.Minute, Limits: lim, Count: true}
	}
	// first and second: the order the take reserves in (slots ascending)
	first, second := q("email", "a@example.com"), q("ip", "192.0.2.1")
	for i := 2; window.Partition(first.Subject, partitions) == window.Partition(second.Subject, partitions); i++ {
		second = q("ip", "192.0.2."+strconv.Itoa(i))
	}
	p1, p2 := window.Partition(first.Subject, partitions), window.Partition(second.Subject, partitions)
	if p1 > p2 {
		first, second, p1, p2 = second, first, p2, p1
	}
	evs := func(i int) []window.QueuedEvent {
		return []window.QueuedEvent{
			{Key: []byte(first.Subject.Kind + ":" + first.Subject.Subject), Value: []byte("first " + strconv.Itoa(i))},
			{Key: []byte(second.Subject.Kind + ":" + second.Subject.Subject), Value: []byte("second " + strconv.Itoa(i))},
		}
	}

	count := func(qq window.EvalQuery) int64 {
		t.Helper()
		states, err := st.Evaluate(ctx, now, []window.EvalQuery{qq}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return states[0].Sums[0]
	}
	check := func(what string, s1, s2 []string, c1, c2 int64) {
		t.Helper()
		if got := takeStream(t, rdb, st, p1); !slices.Equal(got, s1) {
			t.Errorf("%s: first slot's stream %q, want %q", what, got, s1)
		}
		if got := takeStream(t, rdb, st, p2); !slices.Equal(got, s2) {
			t.Errorf("%s: second slot's stream %q, want %q", what, got, s2)
		}
		if a, b := count(first), count(second); a != c1 || b != c2 {
			t.Errorf("%s: counts %d and %d, want %d and %d", what, a, b, c1, c2)
		}
	}

	taken, queued, _, err := taker.TakeQueued(ctx, now, []window.EvalQuery{first, second}, 1, evs(0))
	if err != nil || !taken || !all(queued) {
		t.Fatalf("take across slots: taken %v queued %v err %v, want taken, both queued", taken, queued, err)
	}
	k1 := first.Subject.Kind + ":" + first.Subject.Subject + " "
	k2 := second.Subject.Kind + ":" + second.Subject.Subject + " "
	check("taken", []string{k1 + "first 0"}, []string{k2 + "second 0"}, 1, 1)

	// The second slot refuses (its subject is at the limit): the first
	// slot's reservation and its entry are taken back.
	if ok, _, err := taker.Take(ctx, now, []window.EvalQuery{second}, 1); err != nil || !ok {
		t.Fatalf("fill the second slot: %v %v", ok, err)
	}
	taken, _, _, err = taker.TakeQueued(ctx, now, []window.EvalQuery{first, second}, 1, evs(1))
	if err != nil || taken {
		t.Fatalf("take refused by the second slot: taken %v err %v", taken, err)
	}
	check("refused", []string{k1 + "first 0"}, []string{k2 + "second 0"}, 1, 2)

	// The relay is past every entry (noted in a request): the refund keeps
	// the reservation, whose event goes out.
	if err := rdb.Set(ctx, st.Keys().TakesRelay(p1), "@test 1-0 99999999999999-0 0 0", 0).Err(); err != nil {
		t.Fatal(err)
	}
	taken, _, _, err = taker.TakeQueued(ctx, now, []window.EvalQuery{first, second}, 1, evs(2))
	if err != nil || taken {
		t.Fatalf("take refused after the relay took its entry: taken %v err %v", taken, err)
	}
	check("refund too late", []string{k1 + "first 0", k1 + "first 2"}, []string{k2 + "second 0"}, 2, 2)
}

// takeStream reads partition p's take stream: "<Kafka key> <value>" per
// event, in order.
func takeStream(t *testing.T, rdb *redis.Client, st *window.Store, p int) []string {
	t.Helper()
	xs, err := rdb.XRange(context.Background(), st.Keys().Takes(p), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range xs {
		for _, v := range x.Values {
			k, val, err := window.ParseQueuedEvent(v.(string))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(k)+" "+string(val))
		}
	}
	return out
}
