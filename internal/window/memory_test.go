package window_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// Strict takes of distinct and bucket rules write a distinct set and an
// arrival-time hash: both must expire, and the distinct set must be trimmed
// to what a window can read and capped, as the aggregator's writes are.
func TestStrictTakeKeysExpireAndAreTrimmed(t *testing.T) {
	ctx := context.Background()
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	keys := st.Keys()
	sub := window.Subject{Action: "login", Kind: "ip", Subject: "203.0.113.9"}
	query := func(email string) []window.EvalQuery {
		return []window.EvalQuery{{Subject: sub, MaxWindow: time.Minute, Count: true,
			Limits:  []window.EvalLimit{{Limit: rules.Limit{Count: 100, Window: time.Minute}, Distinct: "email", Block: true}},
			Buckets: []window.EvalBucket{{Rule: "b", Bucket: rules.Bucket{Rate: rules.Limit{Count: 10, Window: time.Second}, Burst: 1000}, Block: true}},
			Values:  map[string]string{"email": email}}}
	}
	now := time.Now().Truncate(time.Second)
	// a value seen two windows ago: no window can read it any more
	old := now.Add(-2 * time.Minute)
	if _, err := st.TakeSlot(ctx, 0, old, []window.TakeRequest{{Queries: query("old@example.com"), N: 1}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		res, err := st.TakeSlot(ctx, 0, now, []window.TakeRequest{{Queries: query(fmt.Sprintf("u%d@example.com", i)), N: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if !res[0].Taken {
			t.Fatalf("take %d refused: %+v", i, res[0])
		}
	}
	dkey, gkey := keys.Distinct(0, sub, "email"), keys.Arrivals(0, sub)
	for _, k := range []string{dkey, gkey} {
		ttl, err := rdb.TTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 {
			t.Errorf("%s: ttl %v; want an expiry", k, ttl)
		}
	}
	if ttl := rdb.TTL(ctx, dkey).Val(); ttl > time.Minute+time.Hour {
		t.Errorf("distinct set expires in %v; want within its window plus slack", ttl)
	}
	if sc, err := rdb.ZScore(ctx, dkey, "old@example.com").Result(); err == nil {
		t.Errorf("value of %v ago still held (score %v): want it trimmed", 2*time.Minute, sc)
	}
	if n := rdb.ZCard(ctx, dkey).Val(); n != 3 {
		t.Errorf("distinct set holds %d values, want 3", n)
	}
}

// The distinct kinds the rules refuse are exactly those whose distinct set
// of a subject x would be a record of the subject "x:d": the test pins the
// key layout the refusal rests on.
func TestReservedDistinctKindsCollide(t *testing.T) {
	k := window.Keys{Prefix: "fg"}
	x := window.Subject{Action: "login", Kind: "ip", Subject: "x"}
	xd := window.Subject{Action: "login", Kind: "ip", Subject: "x:d"}
	for kind, rec := range map[string]string{"deny": k.Deny(0, xd), "shadow": k.Shadow(0, xd), "g": k.Arrivals(0, xd)} {
		if got := k.Distinct(0, x, kind); got != rec {
			t.Errorf("distinct %q of x is %q, the record of x:d is %q: the collision the rules refuse is gone; update rules.reservedDistinct", kind, got, rec)
		}
		yaml := "rules:\n  - name: a\n    action: login\n    kinds: [ip]\n    distinct: " + kind + "\n    limits: [5/m]\n"
		if _, err := rules.Parse([]byte(yaml)); err == nil {
			t.Errorf("distinct %q accepted", kind)
		}
	}
	// every other name keeps its key: no suffix of the subject x:d's keys
	for _, kind := range []string{"email", "d", "s", "user_agent"} {
		d := k.Distinct(0, x, kind)
		for _, rec := range []string{k.Deny(0, xd), k.Shadow(0, xd), k.Arrivals(0, xd)} {
			if d == rec {
				t.Errorf("distinct %q of x collides with %q", kind, rec)
			}
		}
	}
}

const probeRules = `
rules:
  - name: probe-hourly
    action: probe
    kinds: [ip]
    limits: [2/1h]
`

func probeEvents(from, n, per int, at time.Time) []eventT {
	var evs []eventT
	for i := from; i < from+n; i++ {
		for range per {
			evs = append(evs, ev("probe", "ip", fmt.Sprintf("2001:db8:%x:%x::1", i>>16, i&0xffff), at))
		}
	}
	return evs
}

// A snapshot reads the state hash in pages while the aggregator keeps
// writing; the snapshot plus the stream entries after its position is
// exactly the hash as the writes left it, whatever the interleaving.
func TestSnapshotInPagesPlusStreamIsExact(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		rdb := stacktest.Redis(t)
		snapshotInPages(t, rdb, newStore(t, rdb))
	})
	t.Run("cluster", func(t *testing.T) {
		rdb := stacktest.ClusterRedis(t)
		st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.ClusterPrefix(t, rdb), Partitions: onePartition})
		if err != nil {
			t.Fatal(err)
		}
		snapshotInPages(t, rdb, st)
	})
}

// snapshotReader is what the test reads directly of either client.
type snapshotReader interface {
	XRange(ctx context.Context, stream, start, stop string) *redis.XMessageSliceCmd
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
}

func snapshotInPages(t *testing.T, rdb snapshotReader, st *window.Store) {
	ctx := context.Background()
	set := mustRules(t, probeRules)
	b := &batcher{Topic: "t"}
	hr := live.NewHeadroom(100000)
	apply := func(evs []eventT) {
		if _, err := applierOf(t, st).Apply(ctx, "g", b.Batch(evs...), set, base, hr); err != nil {
			t.Error(err)
		}
	}
	const n = 4000 // pages of window.SnapshotPage
	for i := 0; i < n; i += 1000 {
		apply(probeEvents(i, 1000, 1, base))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// while the snapshot pages: held subjects change (a second event
		// denies them) and new subjects come in
		for i := 0; i < 20; i++ {
			apply(probeEvents(i*100, 100, 1, base))
			apply(probeEvents(n+i*100, 100, 1, base))
		}
	}()
	snap, err := st.Snapshot(ctx, 0, base)
	if err != nil {
		t.Fatal(err)
	}
	<-done
	if t.Failed() {
		t.FailNow()
	}
	got := snap.States
	seq := snap.Seq
	msgs, err := rdb.XRange(ctx, st.Keys().Log(0), "("+snap.LastID, "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		c, err := window.ParseChange(m)
		if err != nil {
			t.Fatal(err)
		}
		if c.Seq != seq+1 {
			t.Fatalf("entry %s seq %d after %d", c.ID, c.Seq, seq)
		}
		seq = c.Seq
		for _, sc := range c.States {
			if sc.State == nil {
				delete(got, sc.Subject)
			} else {
				got[sc.Subject] = *sc.State
			}
		}
	}
	flat, err := rdb.HGetAll(ctx, st.Keys().State(0)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(flat) != len(got) {
		t.Fatalf("snapshot plus stream holds %d subjects, the hash %d", len(got), len(flat))
	}
	for f, js := range flat {
		sub, _ := window.ParseField(f)
		want, err := window.ParseState([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		g, ok := got[sub]
		if !ok || fmt.Sprint(g) != fmt.Sprint(want) {
			t.Fatalf("%s: snapshot plus stream %+v (held %v), hash %+v", f, g, ok, want)
		}
	}
	if len(flat) < n {
		t.Fatalf("hash holds %d subjects, want at least %d", len(flat), n)
	}
}

// Prune removes every state that says nothing any more, in pages, and
// nothing else: the states of a partition no batch touches shrink too.
func TestPruneRemovesExpiredStatesByTime(t *testing.T) {
	ctx := context.Background()
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, probeRules)
	b := &batcher{Topic: "t"}
	hr := live.NewHeadroom(100000)
	const n = 1500 // pages of live.PrunePage
	for i := 0; i < n; i += 500 {
		if _, err := applierOf(t, st).Apply(ctx, "g", b.Batch(probeEvents(i, 500, 1, base)...), set, base, hr); err != nil {
			t.Fatal(err)
		}
	}
	// one subject evaluated later lives longer
	late := base.Add(30 * time.Minute)
	if _, err := applierOf(t, st).Apply(ctx, "g", b.Batch(probeEvents(n, 1, 1, late)...), set, late, hr); err != nil {
		t.Fatal(err)
	}
	keys := st.Keys()
	if got := rdb.HLen(ctx, keys.State(0)).Val(); got != n+1 {
		t.Fatalf("state hash holds %d, want %d", got, n+1)
	}
	if removed, err := applierOf(t, st).Prune(ctx, 0, base.Add(time.Minute)); err != nil || removed != 0 {
		t.Fatalf("prune before any expiry removed %d (%v)", removed, err)
	}
	removed, err := applierOf(t, st).Prune(ctx, 0, base.Add(time.Hour+time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if removed != n {
		t.Fatalf("pruned %d, want %d", removed, n)
	}
	if h, z := rdb.HLen(ctx, keys.State(0)).Val(), rdb.ZCard(ctx, keys.Exp(0)).Val(); h != 1 || z != 1 {
		t.Fatalf("after the prune: hash %d, expiries %d; want the later subject alone", h, z)
	}
}

// A bounded snapshot holds at most its bound, every blocking state first,
// and counts what it left out with the time the last of it expires: a
// reader with a cap never holds a partition's whole state hash.
func TestSnapshotAtMostKeepsBlockingStatesFirst(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	ctx := context.Background()
	set := mustRules(t, probeRules)
	b := &batcher{Topic: "t"}
	hr := live.NewHeadroom(100000)
	// 3000 subjects at half the limit (one event of 2/1h), 100 over it.
	evs := append(probeEvents(0, 3000, 1, base), probeEvents(3000, 100, 3, base)...)
	if _, err := applierOf(t, st).Apply(ctx, "g", b.Batch(evs...), set, base, hr); err != nil {
		t.Fatal(err)
	}
	full, err := st.Snapshot(ctx, 0, base)
	if err != nil || len(full.States) != 3100 || full.Omitted != 0 {
		t.Fatalf("unbounded snapshot: %d states, %d omitted, %v; want 3100, 0", len(full.States), full.Omitted, err)
	}
	snap, err := st.SnapshotAtMost(ctx, 0, base, 500)
	if err != nil {
		t.Fatal(err)
	}
	blocking := 0
	for _, s := range snap.States {
		if s.Blocks() {
			blocking++
		}
	}
	if len(snap.States) != 500 || blocking != 100 || snap.Omitted != 2600 {
		t.Fatalf("bounded snapshot: %d states (%d blocking), %d omitted; want 500 (100), 2600", len(snap.States), blocking, snap.Omitted)
	}
	if want := base.Add(time.Hour); snap.OmittedUntil.Before(want) {
		t.Errorf("omitted until %s, want at least %s (the window of the states left out)", snap.OmittedUntil, want)
	}
}
