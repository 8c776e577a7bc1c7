package live_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/strict"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// takeRelayEnv is a store of two partitions over the stack's Redis (or its
// Redis Cluster), a topic of two partitions, a Taker, and a subject of
// partition 1.
type takeRelayEnv struct {
	rdb    redis.UniversalClient
	st     *window.Store
	taker  *strict.Taker
	topic  string
	client *kafka.Client
	q      window.EvalQuery
	n      int
}

func newTakeRelayEnv(t *testing.T, cluster bool) *takeRelayEnv {
	t.Helper()
	bs := stacktest.Brokers(t)
	e := &takeRelayEnv{topic: stacktest.Topic(t, bs, 2), client: &kafka.Client{Addr: kafka.TCP(bs...), Timeout: 10 * time.Second}}
	var prefix string
	if cluster {
		rdb := stacktest.ClusterRedis(t)
		e.rdb, prefix = rdb, stacktest.ClusterPrefix(t, rdb)
	} else {
		rdb := stacktest.Redis(t)
		e.rdb, prefix = rdb, stacktest.Prefix(t, rdb)
	}
	var err error
	if e.st, err = window.NewStore(e.rdb, window.StoreConfig{Prefix: prefix, Partitions: func() int { return 2 }}); err != nil {
		t.Fatal(err)
	}
	if e.taker, err = strict.New(strict.Config{Store: e.st}); err != nil {
		t.Fatal(err)
	}
	lim := []window.EvalLimit{{Limit: rules.Limit{Count: 1_000_000, Window: time.Minute}, Block: true}}
	for i := 0; ; i++ {
		e.q = window.EvalQuery{Subject: window.Subject{Action: "reset", Kind: "email", Subject: "t" + strconv.Itoa(i) + "@example.com"}, MaxWindow: time.Minute, Limits: lim, Count: true}
		if window.Partition(e.q.Subject, 2) == 1 {
			return e
		}
	}
}

// take runs k strict takes of the subject, each queueing one event.
func (e *takeRelayEnv) take(t *testing.T, k int) {
	t.Helper()
	for range k {
		ev := event.Event{V: event.Version, ID: "take-" + strconv.Itoa(e.n), Action: "reset", Kind: "email", Subject: e.q.Subject.Subject, TS: time.Now(), N: 1}
		v, err := event.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		taken, queued, _, err := e.taker.TakeQueued(context.Background(), time.Now(), []window.EvalQuery{e.q}, 1, []window.QueuedEvent{{Key: []byte(ev.Key()), Value: v}})
		if err != nil || !taken || len(queued) != 1 || !queued[0] {
			t.Fatalf("take %d: taken %v queued %v err %v", e.n, taken, queued, err)
		}
		e.n++
	}
}

// published reads partition 1 of the topic to its end: each event id with
// how many times it is there. Every record must carry the counted header
// and name its take entry.
func (e *takeRelayEnv) published(t *testing.T) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{e.topic: {kafka.LastOffsetOf(1)}}})
	if err != nil {
		t.Fatal(err)
	}
	end := res.Topics[e.topic][0].LastOffset
	ids := map[string]int{}
	if end == 0 {
		return ids
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{e.client.Addr.String()}, Topic: e.topic, Partition: 1, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read partition 1 (%d ids so far, end %d): %v", len(ids), end, err)
		}
		ev, err := event.Decode(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		var counted, take string
		for _, h := range m.Headers {
			switch h.Key {
			case event.HeaderCounted:
				counted = string(h.Value)
			case event.HeaderTake:
				take = string(h.Value)
			}
		}
		if counted != "1" || !strings.HasPrefix(take, "1/") || string(m.Key) != ev.Key() {
			t.Fatalf("record %s: key %s counted %q take %q", m.Value, m.Key, counted, take)
		}
		ids[ev.ID]++
		if m.Offset == end-1 {
			return ids
		}
	}
}

// relayed waits until the relay has published and trimmed every queued
// entry.
func (e *takeRelayEnv) relayed(t *testing.T) {
	t.Helper()
	stacktest.WaitFor(t, "take stream relayed", 30*time.Second, func() bool {
		n, err := e.rdb.XLen(context.Background(), e.st.Keys().Takes(1)).Result()
		c, _ := e.rdb.Get(context.Background(), e.st.Keys().TakesRelay(1)).Result()
		return err == nil && n == 0 && len(strings.Fields(c)) == 2 // "@<owner> <last>": nothing pending
	})
}

func (e *takeRelayEnv) run(t *testing.T) (stop func()) {
	t.Helper()
	return e.runWith(t, live.TakeRelayConfig{})
}

func (e *takeRelayEnv) runWith(t *testing.T, cfg live.TakeRelayConfig) (stop func()) {
	t.Helper()
	cfg.Store, cfg.Redis, cfg.Kafka = e.st, e.rdb, e.client
	cfg.Wait, cfg.RetryBackoff = 50*time.Millisecond, 10*time.Millisecond
	if cfg.ProduceTimeout == 0 {
		cfg.ProduceTimeout = 2 * time.Second // a take-over waits 3 s for a pending request
	}
	r, err := live.NewTakeRelay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, e.topic, 1)
	}()
	return func() { cancel(); <-done }
}

// exactlyOnce checks that every take so far is on the partition once.
func (e *takeRelayEnv) exactlyOnce(t *testing.T) {
	t.Helper()
	ids := e.published(t)
	delete(ids, forgedID)
	for i := range e.n {
		if c := ids["take-"+strconv.Itoa(i)]; c != 1 {
			t.Errorf("take-%d published %d times, want once", i, c)
		}
	}
	if len(ids) != e.n {
		t.Errorf("%d events published, want %d", len(ids), e.n)
	}
}

// crashAfterProduce does what a relay does up to its produce request, then
// stops as a SIGKILL would: the cursor says the request is pending. With
// produce false, the relay died before the request went out.
func (e *takeRelayEnv) crashAfterProduce(t *testing.T, produce bool) {
	t.Helper()
	send := e.notePending(t)
	if produce {
		send()
	}
}

// notePending notes a produce request of the entries past the cursor, as a
// relay does before it sends one, and returns the request's sending.
func (e *takeRelayEnv) notePending(t *testing.T) (send func()) {
	t.Helper()
	ctx := context.Background()
	keys := e.st.Keys()
	cur, err := e.rdb.Get(ctx, keys.TakesRelay(1)).Result()
	if f := strings.Fields(cur); err != nil || len(f) != 2 {
		t.Fatalf("cursor %q, %v: want \"@<owner> <last>\"", cur, err)
	}
	owner, last, _ := strings.Cut(cur, " ")
	xs, err := e.rdb.XRangeN(ctx, keys.Takes(1), "("+last, "+", 1000).Result()
	if err != nil || len(xs) == 0 {
		t.Fatalf("entries after %s: %d, %v", last, len(xs), err)
	}
	res, err := e.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{e.topic: {kafka.LastOffsetOf(1)}}})
	if err != nil {
		t.Fatal(err)
	}
	from := res.Topics[e.topic][0].LastOffset
	pending := owner + " " + last + " " + xs[len(xs)-1].ID + " " + strconv.FormatInt(from, 10) + " " + strconv.FormatInt(time.Now().UnixMilli(), 10)
	if err := e.rdb.Set(ctx, keys.TakesRelay(1), pending, 0).Err(); err != nil {
		t.Fatal(err)
	}
	var recs []kafka.Record
	for _, x := range xs {
		for _, v := range x.Values {
			k, val, err := window.ParseQueuedEvent(v.(string))
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, kafka.Record{Time: time.Now(), Key: kafka.NewBytes(k), Value: kafka.NewBytes(val),
				Headers: []kafka.Header{{Key: event.HeaderCounted, Value: []byte("1")}, {Key: event.HeaderTake, Value: []byte("1/" + x.ID)}}})
		}
	}
	return func() {
		t.Helper()
		pr, err := e.client.Produce(ctx, &kafka.ProduceRequest{Topic: e.topic, Partition: 1, RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(recs...)})
		if err == nil {
			err = pr.Error
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// forgedID is the event id of forge's record.
const forgedID = "forged"

// forge writes to partition 1 a record that claims to come from a take
// entry far past any real one.
func (e *takeRelayEnv) forge(t *testing.T) {
	t.Helper()
	v, err := event.Encode(event.Event{V: event.Version, ID: forgedID, Action: "reset", Kind: "email", Subject: e.q.Subject.Subject, TS: time.Now(), N: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec := kafka.Record{Time: time.Now(), Key: kafka.NewBytes([]byte("email:" + e.q.Subject.Subject)), Value: kafka.NewBytes(v),
		Headers: []kafka.Header{{Key: event.HeaderCounted, Value: []byte("1")}, {Key: event.HeaderTake, Value: []byte("1/99999999999999-0")}}}
	res, err := e.client.Produce(context.Background(), &kafka.ProduceRequest{Topic: e.topic, Partition: 1, RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(rec)})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		t.Fatal(err)
	}
}

// The take relay publishes each queued take event once, to its partition,
// marked counted: also when a relay died with a produce request whose
// outcome it never learnt, whether the request reached Kafka (the next
// relay finds it there and does not send it again) or not (it sends it).
func TestTakeRelayPublishesExactlyOnce(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		name := "redis"
		if cluster {
			name = "redis-cluster"
		}
		t.Run(name, func(t *testing.T) { takeRelayExactlyOnce(t, newTakeRelayEnv(t, cluster)) })
	}
}

func takeRelayExactlyOnce(t *testing.T, e *takeRelayEnv) {
	e.take(t, 5)
	stop := e.run(t)
	e.relayed(t)
	e.take(t, 3)
	e.relayed(t)
	stop()
	e.exactlyOnce(t)

	// Killed after Kafka took the request, before the cursor moved.
	e.take(t, 4)
	e.crashAfterProduce(t, true)
	e.take(t, 2) // after the crash: the next relay publishes them
	stop = e.run(t)
	e.relayed(t)
	stop()
	e.exactlyOnce(t)

	// Killed after noting the request, before sending it. A record
	// someone else wrote, naming a later entry, does not make the read-back
	// believe the request landed.
	e.take(t, 3)
	e.crashAfterProduce(t, false)
	e.forge(t)
	stop = e.run(t)
	e.relayed(t)
	stop()
	e.exactlyOnce(t)

	// A request still in flight when the next relay claims the cursor (its
	// relay stalled, or the broker held it): it lands while the new owner
	// waits it out, and is not sent again.
	e.take(t, 3)
	send := e.notePending(t)
	noted, err := e.rdb.Get(context.Background(), e.st.Keys().TakesRelay(1)).Result()
	if err != nil {
		t.Fatal(err)
	}
	stop = e.run(t)
	stacktest.WaitFor(t, "the next relay to claim the cursor", 10*time.Second, func() bool {
		c, err := e.rdb.Get(context.Background(), e.st.Keys().TakesRelay(1)).Result()
		return err == nil && c != noted
	})
	send()
	e.relayed(t)
	stop()
	e.exactlyOnce(t)

	// Requests cut by size: each carries as many entries as fit (here
	// about two events), the rest go in the next.
	e.take(t, 9)
	stop = e.runWith(t, live.TakeRelayConfig{MaxRequestBytes: 200})
	e.relayed(t)
	stop()
	e.exactlyOnce(t)
}

// Two relays of one partition at once (a member that has not noticed it
// was revoked, beside the new owner) publish each entry once: the cursor
// fences them, and one that takes it over from the other waits out the
// other's produce request before reading the partition back.
func TestTakeRelaysOfOnePartitionPublishOnce(t *testing.T) {
	e := newTakeRelayEnv(t, false)
	cfg := live.TakeRelayConfig{ProduceTimeout: time.Second, Linger: time.Millisecond}
	stopA := e.runWith(t, cfg)
	stopB := e.runWith(t, cfg)
	for range 4 {
		e.take(t, 300)
		e.relayed(t)
	}
	stopA()
	stopB()
	e.exactlyOnce(t)
}

// A Redis failover to a replica that lacked the relay's last cursor moves
// (and trims) gives the cursor back an older value of the running relay's
// own, with entries it published still in the stream after it. The relay
// knows what it published: it writes its own cursor again instead of
// reading back from the older one, and publishes nothing twice.
func TestTakeRelayCursorGoneBack(t *testing.T) {
	e := newTakeRelayEnv(t, false)
	ctx := context.Background()
	keys := e.st.Keys()
	e.take(t, 5)
	stop := e.run(t)
	e.relayed(t)
	older, err := e.rdb.Get(ctx, keys.TakesRelay(1)).Result()
	if err != nil {
		t.Fatal(err)
	}
	e.take(t, 3)
	e.relayed(t)

	// the replica: the older cursor, and the three entries it had not
	// seen published (read back from the topic: each record names its
	// entry)
	entries := map[string][]any{}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{e.client.Addr.String()}, Topic: e.topic, Partition: 1})
	defer r.Close()
	r.SetOffset(5)
	for range 3 {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := r.ReadMessage(rctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range m.Headers {
			if h.Key == event.HeaderTake {
				id := strings.TrimPrefix(string(h.Value), "1/")
				entries[id] = append(entries[id], "e"+strconv.Itoa(len(entries[id])), strconv.Itoa(len(m.Key))+":"+string(m.Key)+string(m.Value))
			}
		}
	}
	ids := make([]string, 0, len(entries))
	for id := range entries {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	})
	pipe := e.rdb.TxPipeline()
	pipe.Del(ctx, keys.Takes(1))
	for _, id := range ids {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: keys.Takes(1), ID: id, Values: entries[id]})
	}
	pipe.Set(ctx, keys.TakesRelay(1), older, 0)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	e.take(t, 2) // the relay's next move finds the older cursor
	e.relayed(t)
	stop()
	e.exactlyOnce(t)
}

// A Redis that loses the take relay's cursor and stream (a restart without
// persistence, a flush) may then hold an entry at or below the running
// relay's last: an owner's take appended at its epoch before the owner
// noticed the loss. The relay finds its cursor gone on its next read, not
// only on its next move (an idle relay makes none), claims it again from
// the stream's start and publishes the entry.
func TestTakeRelayCursorLost(t *testing.T) {
	e := newTakeRelayEnv(t, false)
	ctx := context.Background()
	keys := e.st.Keys()
	e.take(t, 5)
	stop := e.run(t)
	defer stop()
	e.relayed(t)

	ev := event.Event{V: event.Version, ID: "take-" + strconv.Itoa(e.n), Action: "reset", Kind: "email", Subject: e.q.Subject.Subject, TS: time.Now(), N: 1}
	v, err := event.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	e.n++
	pipe := e.rdb.TxPipeline()
	pipe.Del(ctx, keys.Takes(1), keys.TakesRelay(1))
	// below every id the relay published (they are Redis times)
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: keys.Takes(1), ID: "1-1", Values: []any{"e0", strconv.Itoa(len(ev.Key())) + ":" + ev.Key() + string(v)}})
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	e.relayed(t)
	stop()
	e.exactlyOnce(t)
}
