package live

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window/windowtest"
)

// A Redis failover to a replica that lacked the owner's last append and
// the take relay's last cursor move: the relay goes on from what it
// published (its own position, past the replica's cursor), and the
// owner's next append lands at the id of the entry the replica lacked, an
// id the relay has passed. The owner notices (the id is not past the last
// acknowledged); the entry it finds in the stream the relay would never
// publish, so it takes it back and appends it again at a new epoch: every
// take admitted reaches the topic once.
func TestOwnerTakesAppendBehindTheRelayPublishedOnce(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := windowtest.NewStore(t, rdb)
	bs := stacktest.Brokers(t)
	topic := stacktest.Topic(t, bs, 1)
	client := &kafka.Client{Addr: kafka.TCP(bs...), Timeout: 10 * time.Second}
	relay, err := NewTakeRelay(TakeRelayConfig{Store: st, Redis: rdb, Kafka: client, ProduceTimeout: time.Second,
		Wait: 20 * time.Millisecond, Linger: time.Millisecond, RetryBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); relay.Run(ctx, topic, 0) }()
	t.Cleanup(func() { cancel(); <-done })
	// the owner's topic is "lt": the relay's stands for it
	o := newTestOwnerRelay(t, rdb, st, 100, nil, relay, func(ctx context.Context, _ string, partition int) (int64, int64, error) {
		return topicBounds(ctx, client, topic, partition)
	})
	p := o.s.part(0)
	stacktest.WaitFor(t, "the owner answering", 30*time.Second, func() bool {
		o.s.reopenTakes(context.Background(), "lt", 0, p)
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.takes.open
	})
	go countTakes(ctx, o, client, topic)

	cursor := st.Keys().TakesRelay(0)
	takeRelayed := func() string {
		t.Helper()
		if !o.take() {
			t.Fatal("a take failed")
		}
		var c string
		stacktest.WaitFor(t, "the take published", 30*time.Second, func() bool {
			if publishedTakes(t, client, topic)[o.took[len(o.took)-1]] != 1 {
				return false
			}
			// read after the topic: nothing pending is the move past it
			c, _ = rdb.Get(context.Background(), cursor).Result()
			return len(strings.Fields(c)) == 2
		})
		return c
	}
	older := takeRelayed()
	takeRelayed()

	// the replica: the stream as it stood before the last entry (the
	// relay had trimmed it empty), the cursor before it
	bg := context.Background()
	f := strings.Fields(older)
	pipe := rdb.TxPipeline()
	pipe.Del(bg, o.key)
	pipe.XAdd(bg, &redis.XAddArgs{Stream: o.key, ID: f[1], Values: []any{"fence", "1"}})
	pipe.XDel(bg, o.key, f[1])
	pipe.Set(bg, cursor, older, 0)
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	if !o.take() {
		t.Fatal("the take that finds the loss failed; want it appended")
	}
	o.settled()
	stacktest.WaitFor(t, "every take admitted published", 30*time.Second, func() bool {
		got := publishedTakes(t, client, topic)
		for _, id := range o.took {
			if got[id] != 1 {
				return false
			}
		}
		return len(got) == len(o.took)
	})
}

// publishedTakes reads partition 0 of topic to its end: each event id with
// how many times it is there.
func publishedTakes(t *testing.T, client *kafka.Client, topic string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(0)}}})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	end := res.Topics[topic][0].LastOffset
	if end <= 0 {
		return ids
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{client.Addr.String()}, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read partition 0 (%d ids so far, end %d): %v", len(ids), end, err)
		}
		ev, err := event.Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		ids[ev.ID]++
		if m.Offset == end-1 {
			return ids
		}
	}
}

// topicBounds is a partition's first offset and its end.
func topicBounds(ctx context.Context, client *kafka.Client, topic string, partition int) (int64, int64, error) {
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.FirstOffsetOf(partition), kafka.LastOffsetOf(partition)}}})
	if err != nil {
		return 0, 0, err
	}
	po := res.Topics[topic][0]
	if po.Error != nil {
		return 0, 0, po.Error
	}
	return po.FirstOffset, po.LastOffset, nil
}

// countTakes is the apply of o's partition, as far as owner takes see it:
// each take event published, read from the topic, is counted (it leaves
// the overlay and the appends remembered) and the partition's applied
// offset moves past it.
func countTakes(ctx context.Context, o *testOwner, client *kafka.Client, topic string) {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{client.Addr.String()}, Topic: topic, Partition: 0, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	p := o.s.part(0)
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			return
		}
		ev, err := event.Decode(m.Value)
		if err != nil {
			continue
		}
		b := consume.Batch{Topic: topic, First: m.Offset, Last: m.Offset, Records: []consume.Record{{Offset: m.Offset, Event: ev, Take: true}}}
		p.mu.Lock()
		o.s.takesApplied(ctx, b, p, nil)
		p.mu.Unlock()
	}
}

// The take-back deletes the entries it is given from the take stream, but
// not those the relay's cursor notes in a produce request (past its last,
// up to its pending), and moves the refunds counter; many entries go in
// runs of maxTakeBack.
func TestTakeBackKeepsWhatARequestHolds(t *testing.T) {
	o := newLossOwner(t)
	ctx := context.Background()
	keys := o.st.Keys()
	const n = 2*maxTakeBack + 500
	// past the owner's fence
	info, err := o.rdb.XInfoStream(ctx, o.key).Result()
	if err != nil {
		t.Fatal(err)
	}
	ms, err := parseStreamID(info.LastGeneratedID)
	if err != nil {
		t.Fatal(err)
	}
	id := func(m, i int) string { return strconv.FormatUint(ms.ms+uint64(m), 10) + "-" + strconv.Itoa(i) }
	pipe := o.rdb.Pipeline()
	due := map[string]bool{}
	for i := 1; i <= n; i++ {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: o.key, ID: id(1, i), Values: []any{"e0", "x"}})
		due[id(1, i)] = true
	}
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: o.key, ID: id(2, 1), Values: []any{"e0", "x"}}) // not due
	pipe.Set(ctx, keys.TakesRelay(0), "@r "+id(1, 100)+" "+id(1, 200)+" 0 1", 0)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	taken, err := o.s.runTakeBack(ctx, 0, due)
	if err != nil {
		t.Fatal(err)
	}
	left, err := o.rdb.XRange(ctx, o.key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(taken) != n || len(left) != 101 || left[0].ID != id(1, 101) || left[99].ID != id(1, 200) || left[100].ID != id(2, 1) {
		t.Fatalf("answered %d of %d; the stream holds %d entries: want the 100 in the request and the one not due", len(taken), n, len(left))
	}
	for i := 1; i <= n; i++ {
		if keep, want := taken[id(1, i)], i > 100 && i <= 200; keep != want {
			t.Errorf("entry %s: kept %v, want %v", id(1, i), keep, want)
		}
	}
	if v, err := o.rdb.Get(ctx, keys.TakesRefunds(0)).Int(); err != nil || v != 3 {
		t.Errorf("refunds counter %d (%v): want 3, one per run that deleted", v, err)
	}
}
