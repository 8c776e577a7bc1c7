package decide_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// change is one stream entry with a near (count 1 of 2/1h) or a blocking
// (count 2 of 2/1h, until an hour on) state per subject, decoded as the
// limiter decodes what the aggregator writes: the strings are fresh, as in
// production.
func change(tb testing.TB, seq int64, at time.Time, blocking bool, subs ...window.Subject) window.Change {
	tb.Helper()
	s := "["
	for i, sub := range subs {
		if i > 0 {
			s += ","
		}
		count, until := 1, int64(0)
		if blocking {
			count, until = 2, at.Add(time.Hour).Unix()
		}
		s += fmt.Sprintf(`[%q,{"t":%d,"l":[["ip-hourly",2,3600,%d,%d]]}]`, window.Field(sub), at.Unix(), count, until)
	}
	s += "]"
	c, err := window.ParseChange(redis.XMessage{ID: fmt.Sprintf("%d-0", seq), Values: map[string]any{"q": fmt.Sprint(seq), "o": fmt.Sprint(seq), "s": s}})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func ipSubject(i int) window.Subject {
	return window.Subject{Action: "login", Kind: "ip", Subject: fmt.Sprintf("2001:db8:%x:%x::1", i>>16, i&0xffff)}
}

// Past its cap the state holds no more than the cap, keeps blocking states
// before near ones, and says that a subject it does not hold is unknown
// (to be read from Redis) until every state it left out has expired.
func TestStateCapKeepsDeniesAndReportsUnknown(t *testing.T) {
	const capSubjects = 640
	st := decide.NewBoundedState(capSubjects)
	now := time.Now().Truncate(time.Second)
	seq := int64(0)
	var near, deny []window.Subject
	for i := range 2000 {
		near = append(near, ipSubject(i))
	}
	for i := range 300 {
		deny = append(deny, ipSubject(100000+i))
	}
	seq++
	st.Apply(0, change(t, seq, now, false, near...))
	if n := st.Len(); n > capSubjects+64 {
		t.Fatalf("held %d subjects past a cap of %d", n, capSubjects)
	}
	if st.Overflows() == 0 || st.Complete(now) {
		t.Fatalf("overflows %d complete %v: want the cap reported", st.Overflows(), st.Complete(now))
	}
	seq++
	st.Apply(0, change(t, seq, now, true, deny...))
	if n := st.Len(); n > capSubjects+64 {
		t.Fatalf("held %d subjects past a cap of %d", n, capSubjects)
	}
	kept := 0
	for _, sub := range deny {
		if s, held, known := st.Lookup(sub, now); held && known && s.Limits[0].Until.After(now) {
			kept++
		} else if !held && known {
			t.Fatalf("%s: a blocking state left out but reported known", sub.Subject)
		}
	}
	// 300 blocking states over 64 shards of 10: a shard with more than 10
	// of them keeps 10; all the others take a near state's place.
	if kept < 250 {
		t.Errorf("kept %d of 300 blocking states over near ones", kept)
	}
	// A subject never seen is unknown while left-out states last, then
	// known to be under half again.
	fresh := ipSubject(999999)
	if _, held, known := st.Lookup(fresh, now); held || known {
		t.Fatalf("unseen subject: held %v known %v during the gap; want unknown", held, known)
	}
	later := now.Add(time.Hour + time.Second)
	if _, held, known := st.Lookup(fresh, later); held || !known {
		t.Fatalf("unseen subject after every left-out state expired: held %v known %v", held, known)
	}
}

// An unbounded state (NewState, the old behaviour) is always complete.
func TestStateUnboundedIsComplete(t *testing.T) {
	st := decide.NewState()
	now := time.Now()
	var subs []window.Subject
	for i := range 1000 {
		subs = append(subs, ipSubject(i))
	}
	st.Apply(0, change(t, 1, now, false, subs...))
	if st.Len() != 1000 || !st.Complete(now) || st.Overflows() != 0 {
		t.Fatalf("len %d complete %v overflows %d", st.Len(), st.Complete(now), st.Overflows())
	}
}

// A resync of a partition never leaves a subject it holds before and after
// absent in between: a reader looking up a denied subject during resyncs
// always finds it (an absent one would be allowed).
func TestStateResetNeverDropsAHeldSubject(t *testing.T) {
	st := decide.NewState()
	now := time.Now().Truncate(time.Second)
	var subs []window.Subject
	for i := range 5000 {
		subs = append(subs, ipSubject(i))
	}
	denied := subs[4321]
	c := change(t, 1, now, true, subs...)
	snap := window.Snapshot{LastID: "1-0", Seq: 1, States: map[window.Subject]window.SubjectState{}}
	for _, sc := range c.States {
		snap.States[sc.Subject] = *sc.State
	}
	// one subject of another partition stays put
	other := ipSubject(777777)
	st.Apply(1, change(t, 1, now, true, other))
	st.Reset(0, snap)
	var stop atomic.Bool
	var missed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if _, ok := st.Get(denied, now); !ok {
				missed.Add(1)
			}
		}
	}()
	for range 10 {
		st.Reset(0, snap)
	}
	stop.Store(true)
	wg.Wait()
	if missed.Load() > 0 {
		t.Fatalf("the denied subject was absent %d times during resyncs", missed.Load())
	}
	// a resync without a subject drops it, and only from its partition
	delete(snap.States, denied)
	st.Reset(0, snap)
	if _, ok := st.Get(denied, now); ok {
		t.Fatal("subject gone from the snapshot still held")
	}
	if _, ok := st.Get(other, now); !ok {
		t.Fatal("another partition's subject dropped by a resync")
	}
}

// TestStateBytesPerSubject prints the heap one held subject costs (an IPv6
// address, one near limit), the figure docs/limiter.md ("Memory") quotes;
// it asserts only that the cap holds.
func TestStateBytesPerSubject(t *testing.T) {
	const n = 20000
	now := time.Now().Truncate(time.Second)
	measure := func(st *decide.State) (held int, bytes float64) {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := 0; i < n; i += 500 {
			var subs []window.Subject
			for k := i; k < i+500; k++ {
				subs = append(subs, ipSubject(k))
			}
			st.Apply(0, change(t, int64(i+1), now, false, subs...))
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		held = st.Len()
		runtime.KeepAlive(st)
		return held, float64(after.HeapAlloc-before.HeapAlloc) / float64(max(held, 1))
	}
	held, per := measure(decide.NewState())
	t.Logf("unbounded: %d subjects held, %.0f bytes each", held, per)
	if held != n {
		t.Fatalf("held %d of %d", held, n)
	}
	capped, perCapped := measure(decide.NewBoundedState(n / 4))
	t.Logf("cap %d: %d subjects held, %.0f bytes each", n/4, capped, perCapped)
	if capped > n/4+64 {
		t.Fatalf("held %d past the cap %d", capped, n/4)
	}
}
