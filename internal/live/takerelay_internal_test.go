package live

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// A strict take's refund that deletes an entry the relay has read, but not
// yet noted in a request, makes the note fail and change nothing: the relay
// reads again and sends the rest, never the refunded entry.
func TestTakeRelayNoteRefusesAChangedBatch(t *testing.T) {
	rdb, st, r := newIdleTakeRelay(t)
	ctx := context.Background()
	key := st.Keys().Takes(1)
	for range 3 {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []string{"1", "x"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rs, wait, err := r.claim(ctx, 1, nil)
	if err != nil || wait != 0 || rs.cur.last != "0-0" {
		t.Fatalf("claim: %+v, wait %v, %v", rs, wait, err)
	}
	note := func(msgs []redis.XMessage) error {
		c := takeCursor{owner: rs.cur.owner, last: rs.cur.last, pending: msgs[len(msgs)-1].ID, from: 7}
		_, err := r.write(ctx, 1, rs, c, "")
		return err
	}
	msgs, err := r.read(ctx, 1, rs)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("read %d entries, %v", len(msgs), err)
	}
	if refunded, err := st.Refund(ctx, 1, time.Now(), nil, 1, msgs[1].ID); err != nil || !refunded {
		t.Fatalf("refund of entry %s: %v, %v", msgs[1].ID, refunded, err)
	}
	claimed := rs.raw
	if err := note(msgs); !errors.Is(err, errTakeBatchChanged) {
		t.Fatalf("note over a deleted entry: %v, want errTakeBatchChanged", err)
	}
	if got, err := rdb.Get(ctx, st.Keys().TakesRelay(1)).Result(); err != nil || got != claimed || rs.raw != claimed {
		t.Fatalf("cursor %q (%v), state %q: want %q unchanged", got, err, rs.raw, claimed)
	}
	msgs, err = r.read(ctx, 1, rs)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("read again: %d entries, %v", len(msgs), err)
	}
	if err := note(msgs); err != nil || rs.cur.pending != msgs[1].ID || rs.cur.since == 0 {
		t.Fatalf("note: %v, cursor %+v", err, rs.cur)
	}
}

// A relay that restarts after Redis went back to an older value of its
// last run's cursor (a failover that lost the run's last moves) goes on
// from where that run was, not from the older value: it would publish
// again what the run published since.
func TestTakeRelayClaimAfterRedisWentBack(t *testing.T) {
	rdb, st, r := newIdleTakeRelay(t)
	ctx := context.Background()
	prev, _, err := r.claim(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	older := prev.raw
	if _, err := r.write(ctx, 1, prev, takeCursor{owner: prev.cur.owner, last: "100-7"}, ""); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, st.Keys().TakesRelay(1), older, 0).Err(); err != nil {
		t.Fatal(err)
	}
	rs, _, err := r.claim(ctx, 1, prev)
	if err != nil || rs.cur.last != "100-7" || rs.cur.owner == prev.cur.owner {
		t.Fatalf("claim after Redis went back: %+v, %v; want the last run's position, 100-7, under a new token", rs, err)
	}
	// another relay's cursor is trusted as it stands
	if err := rdb.Set(ctx, st.Keys().TakesRelay(1), "@other 50-1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if rs, _, err = r.claim(ctx, 1, prev); err != nil || rs.cur.last != "50-1" {
		t.Fatalf("claim over another relay's cursor: %+v, %v; want its 50-1", rs, err)
	}
}

// newIdleTakeRelay is a take relay over a store of two partitions on the
// stack's Redis, which the test drives step by step (Kafka unused).
func newIdleTakeRelay(t *testing.T) (*redis.Client, *window.Store, *TakeRelay) {
	t.Helper()
	rdb := stacktest.Redis(t)
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: func() int { return 2 }})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewTakeRelay(TakeRelayConfig{Store: st, Redis: rdb, Kafka: &kafka.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	return rdb, st, r
}
