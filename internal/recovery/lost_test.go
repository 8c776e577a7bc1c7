package recovery_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/recovery"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/topics"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// lostEnv is one test's topic, store and rules.
type lostEnv struct {
	t        *testing.T
	brokers  []string
	rdb      *redis.Client
	topic    string
	parts    int
	store    *window.Store
	ap       *live.Applier // the live group's, writing through
	rb       *live.Applier // the rebuild's, writing back
	set      *rules.Set
	subjects map[int]string // partition -> a subject that lives there
	log      *syncBuffer
}

func newLostEnv(t *testing.T, parts int) *lostEnv {
	t.Helper()
	brokers := stacktest.Brokers(t)
	rdb := stacktest.Redis(t)
	e := &lostEnv{t: t, brokers: brokers, rdb: rdb, topic: stacktest.Topic(t, brokers, parts), parts: parts,
		subjects: map[int]string{}, log: &syncBuffer{}}
	var err error
	e.set, err = rules.Parse([]byte("rules:\n  - name: r\n    action: login_failed\n    kinds: [ip]\n    limits: [100000/1h]\n"))
	if err != nil {
		t.Fatal(err)
	}
	e.store, err = window.NewStore(rdb, window.StoreConfig{Prefix: stacktest.Prefix(t, rdb), Partitions: func() int { return parts }})
	if err != nil {
		t.Fatal(err)
	}
	if e.ap, err = live.NewApplier(e.store, live.ApplierConfig{}); err != nil {
		t.Fatal(err)
	}
	if e.rb, err = live.NewApplier(e.store, live.ApplierConfig{WriteBack: true, CheckpointPart: 3}); err != nil {
		t.Fatal(err)
	}
	for i := 0; len(e.subjects) < parts; i++ {
		s := fmt.Sprintf("192.0.2.%d", i)
		if p := window.Partition(e.sub(s), parts); e.subjects[p] == "" {
			e.subjects[p] = s
		}
	}
	return e
}

func (e *lostEnv) sub(s string) window.Subject {
	return window.Subject{Action: "login_failed", Kind: "ip", Subject: s}
}

// produce writes n events of partition p's subject; they land at the
// partition's next n offsets.
func (e *lostEnv) produce(ctx context.Context, p, n int) []consume.Record {
	e.t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(e.brokers...), Topic: e.topic, Balancer: &kafka.Murmur2Balancer{}, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	var msgs []kafka.Message
	var recs []consume.Record
	for range n {
		ev := event.Event{V: event.Version, ID: event.NewID(), Action: "login_failed", Kind: "ip", Subject: e.subjects[p], TS: time.Now(), N: 1}
		v, err := event.Encode(ev)
		if err != nil {
			e.t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(ev.Key()), Value: v})
		recs = append(recs, consume.Record{Event: ev})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		e.t.Fatal(err)
	}
	return recs
}

// counted stands for the live group: partition p's first records counted
// and its offset stored, as the aggregator would have.
func (e *lostEnv) counted(ctx context.Context, p int, recs []consume.Record) {
	e.t.Helper()
	b := consume.Batch{Topic: e.topic, Partition: p, First: 0, Last: int64(len(recs)) - 1}
	for i, r := range recs {
		r.Offset = int64(i)
		b.Records = append(b.Records, r)
	}
	if _, err := e.ap.Apply(ctx, "live", b, e.set, time.Now(), nil); err != nil {
		e.t.Fatal(err)
	}
}

// count is partition p's subject's 1h sum.
func (e *lostEnv) count(ctx context.Context, p int) int64 {
	e.t.Helper()
	st, err := e.store.Check(ctx, time.Now(), []window.Query{{Subject: e.sub(e.subjects[p]), Windows: []time.Duration{time.Hour}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return st[0].Sums[0]
}

func (e *lostEnv) offset(ctx context.Context, p int) int64 {
	e.t.Helper()
	next, ok, err := e.store.Resume(ctx, "live", e.topic, p)
	if err != nil {
		e.t.Fatal(err)
	}
	if !ok {
		return -1
	}
	return next
}

// decided is partition p's decisions offset D (offset is where it
// resumes: its checkpoint C when it has one).
func (e *lostEnv) decided(ctx context.Context, p int) int64 {
	e.t.Helper()
	d, err := e.rdb.Get(ctx, e.store.Keys().Offset("live", e.topic, p)).Int64()
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

func (e *lostEnv) deleteBelow(ctx context.Context, p int, off int64) {
	e.t.Helper()
	if _, err := topics.DeleteRecords(ctx, e.brokers, e.topic, map[int]int64{p: off}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *lostEnv) rebuild(ctx context.Context, policy consume.LostOffsetsPolicy, reset, force bool) (recovery.Result, error) {
	return recovery.Rebuild(ctx, recovery.Config{Brokers: e.brokers, Topic: e.topic, Group: "live", Store: e.store, Applier: e.rb, Rules: e.set,
		Reset: reset, Force: force, Redis: e.rdb, OnLostOffsets: policy, Logger: slog.New(slog.NewTextHandler(e.log, nil))})
}

// syncBuffer is a log sink for the rebuild's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRebuildRetentionGap: the live group counted 3 events of partition 0
// (its offset in Redis) and committed offset 2 of partition 1 to Kafka
// (Redis lost that one); retention then deleted records of both that the
// group had never counted. The rebuild finds the 3 + 2 lost offsets before
// it writes: with skip it reports them (ERROR naming group, partition and
// offsets; Result.Lost) and counts everything the log still holds; with
// stop it fails and writes nothing.
//
// Without Reset (Force), partition 0 keeps its 3 counted events and its
// offset: the replay's first batch starts there and covers the lost
// offsets, which are reported once.
func TestRebuildRetentionGap(t *testing.T) {
	for _, tc := range []struct {
		policy consume.LostOffsetsPolicy
		reset  bool
	}{{consume.LostOffsetsSkip, true}, {consume.LostOffsetsStop, true}, {consume.LostOffsetsSkip, false}} {
		policy := tc.policy
		name := string(policy) + map[bool]string{true: "-reset", false: "-force"}[tc.reset]
		t.Run(name, func(t *testing.T) {
			e := newLostEnv(t, 2)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			recs := e.produce(ctx, 0, 10)
			e.produce(ctx, 1, 10)
			e.counted(ctx, 0, recs[:3])
			client := &kafka.Client{Addr: kafka.TCP(e.brokers...)}
			if _, err := client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: "live", GenerationID: -1,
				Topics: map[string][]kafka.OffsetCommit{e.topic: {{Partition: 1, Offset: 2}}}}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_, _ = client.DeleteGroups(context.Background(), &kafka.DeleteGroupsRequest{GroupIDs: []string{"live"}})
			})
			e.deleteBelow(ctx, 0, 6)
			e.deleteBelow(ctx, 1, 4)

			res, err := e.rebuild(ctx, policy, tc.reset, !tc.reset)
			if policy == consume.LostOffsetsStop {
				var lost *consume.LostOffsetsError
				if !errors.As(err, &lost) {
					t.Fatalf("rebuild with stop: %v, want a LostOffsetsError", err)
				}
				if got0, got1, off := e.count(ctx, 0), e.count(ctx, 1), e.offset(ctx, 0); got0 != 3 || got1 != 0 || off != 3 || res.Deleted != 0 {
					t.Fatalf("rebuild with stop wrote: counts %d and %d, offset %d, %d keys deleted; want 3, 0, 3 and none", got0, got1, off, res.Deleted)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Lost != 3+2 {
				t.Errorf("Result.Lost = %d, want 5", res.Lost)
			}
			want0 := int64(4) // what the log holds
			if !tc.reset {
				want0 += 3 // and what Redis kept
			}
			if got0, got1 := e.count(ctx, 0), e.count(ctx, 1); got0 != want0 || got1 != 6 {
				t.Errorf("counts after rebuild %d and %d, want %d and 6", got0, got1, want0)
			}
			if off0, off1 := e.offset(ctx, 0), e.offset(ctx, 1); off0 != 10 || off1 != 10 {
				t.Errorf("stored offsets %d and %d, want 10 and 10", off0, off1)
			}
			log := e.log.String()
			for _, want := range []string{"partition=0 from=3 to=5 lost=3", "partition=1 from=2 to=3 lost=2"} {
				if n := strings.Count(log, want); n != 1 || !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "group=live") {
					t.Errorf("want one ERROR line of group live with %q, have %d:\n%s", want, n, log)
				}
			}
		})
	}
}

// TestRebuildTopicRecreated: Redis holds an offset beyond the log's end
// (the topic was deleted and recreated since). Without the check every
// replayed batch would be taken for one already applied and nothing
// rebuilt. With skip the rebuild reports it, moves the offset back and
// counts the new log; with stop it fails and writes nothing.
func TestRebuildTopicRecreated(t *testing.T) {
	for _, policy := range []consume.LostOffsetsPolicy{consume.LostOffsetsSkip, consume.LostOffsetsStop} {
		t.Run(string(policy), func(t *testing.T) {
			e := newLostEnv(t, 1)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			// The old log's 50 offsets, counted; then the new log's 5.
			if _, err := e.ap.Apply(ctx, "live", consume.Batch{Topic: e.topic, First: 0, Last: 49}, e.set, time.Now(), nil); err != nil {
				t.Fatal(err)
			}
			e.produce(ctx, 0, 5)

			res, err := e.rebuild(ctx, policy, false, true)
			if policy == consume.LostOffsetsStop {
				var lost *consume.LostOffsetsError
				if !errors.As(err, &lost) || !lost.Beyond {
					t.Fatalf("rebuild with stop: %v, want a LostOffsetsError beyond the log's end", err)
				}
				if got, off := e.count(ctx, 0), e.offset(ctx, 0); got != 0 || off != 50 {
					t.Fatalf("rebuild with stop wrote: count %d, offset %d; want 0 and 50", got, off)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Recreated != 1 || res.Events != 5 {
				t.Errorf("Result %+v, want 1 partition recreated and 5 events", res)
			}
			if got, off := e.count(ctx, 0), e.offset(ctx, 0); got != 5 || off != 5 {
				t.Errorf("count %d, offset %d after rebuild; want 5 and 5", got, off)
			}
			if log := e.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "stored=50 log_start=0") {
				t.Errorf("log lacks the ERROR naming the offsets:\n%s", log)
			}
		})
	}
}

// TestRebuildForceReplaysWriteBackMemory: a write-back owner of the live
// group checkpointed its partition at offset 4, decided up to 10 (a deny at
// the sixth event) and died before its next checkpoint: Redis holds the
// subject's count as of 4 only, the rest was in its memory. A forced
// rebuild counts from the checkpoint, not from the decisions offset, and
// leaves the count exact with both offsets at the log's end. (Were it to
// write through, the records before 10 would be skipped as held and the
// count stay 4.)
func TestRebuildForceReplaysWriteBackMemory(t *testing.T) {
	e := newLostEnv(t, 1)
	var err error
	if e.set, err = rules.Parse([]byte("rules:\n  - name: r\n    action: login_failed\n    kinds: [ip]\n    limits: [5/1h]\n")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	recs := e.produce(ctx, 0, 10)
	for i := range recs {
		recs[i].Offset = int64(i)
	}
	owner, err := live.NewApplier(e.store, live.ApplierConfig{WriteBack: true})
	if err != nil {
		t.Fatal(err)
	}
	hr := live.NewHeadroom(100)
	if _, _, err := owner.Resume(ctx, "live", e.topic, 0, hr); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Apply(ctx, "live", consume.Batch{Topic: e.topic, First: 0, Last: 3, Records: recs[:4]}, e.set, time.Now(), hr); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Checkpoint(ctx, "live", e.topic, 0, hr, time.Now()); err != nil {
		t.Fatal(err)
	}
	res, err := owner.Apply(ctx, "live", consume.Batch{Topic: e.topic, First: 4, Last: 9, Records: recs[4:]}, e.set, time.Now(), hr)
	if err != nil {
		t.Fatal(err)
	}
	if c, d, got := e.offset(ctx, 0), e.decided(ctx, 0), e.count(ctx, 0); len(res.Decisions) != 1 || c != 4 || d != 10 || got != 4 {
		t.Fatalf("owner left %d decisions, checkpoint %d, decisions offset %d, count %d in Redis; want 1, 4, 10 and 4",
			len(res.Decisions), c, d, got)
	}

	if _, err := e.rebuild(ctx, consume.LostOffsetsSkip, false, true); err != nil {
		t.Fatal(err)
	}
	if got, c, d := e.count(ctx, 0), e.offset(ctx, 0), e.decided(ctx, 0); got != 10 || c != 10 || d != 10 {
		t.Errorf("after the rebuild: count %d, checkpoint %d, decisions offset %d; want 10, 10 and 10\n%s", got, c, d, e.log.String())
	}
}
