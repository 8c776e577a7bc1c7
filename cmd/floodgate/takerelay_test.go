package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/kafkatopics"
	"github.com/floodgate-dev/floodgate/internal/strict"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// A strict rule no take reaches: every take counts and queues its event.
const strictTakeRules = `
rules:
  - name: reset
    action: crash
    kinds: [k]
    limits: [1000000000/1d]
    strict: true
`

// takeLoad runs strict takes as the limiter does, each of two subjects
// (most often of two slots) queueing each subject's event in its slot's
// take stream, and records them.
type takeLoad struct {
	e     *liveEnv
	taker *strict.Taker
	set   *rules.Set
	subs  []string
	mu    sync.Mutex
	ids   map[string]string // event id -> subject
	next  int
}

// take runs n takes round-robin over the subjects, from 8 goroutines so
// that the Taker batches them as it batches a limiter's.
func (l *takeLoad) take(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	from := l.next
	l.next += n
	l.mu.Unlock()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := from + g; i < from+n; i += 8 {
				if err := l.one(l.pair(i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// pair is the i-th take's subjects: two neighbours of the list.
func (l *takeLoad) pair(i int) (a, b string) {
	return l.subs[i%len(l.subs)], l.subs[(i+1)%len(l.subs)]
}

func (l *takeLoad) one(subjects ...string) error {
	r := l.set.Rules()[0]
	var qs []window.EvalQuery
	var evs []event.Event
	var queue []window.QueuedEvent
	for _, subject := range subjects {
		ev := event.Event{ID: event.NewID(), Action: "crash", Kind: "k", Subject: subject, TS: time.Now(), N: 1}
		v, err := event.Encode(ev)
		if err != nil {
			return err
		}
		qs = append(qs, window.EvalQuery{
			Subject:    window.Subject{Action: ev.Action, Kind: ev.Kind, Subject: subject},
			MaxWindow:  l.set.MaxWindowFor(ev.Action, ev.Kind),
			Limits:     []window.EvalLimit{{Limit: r.Limits[0], Block: true}},
			BlockRules: []string{r.Name},
			Count:      true,
		})
		evs = append(evs, ev)
		queue = append(queue, window.QueuedEvent{Key: []byte(ev.Key()), Value: v})
	}
	taken, queued, _, err := l.taker.TakeQueued(context.Background(), time.Now(), qs, 1, queue)
	if err != nil || !taken || len(queued) != len(queue) || slices.Contains(queued, false) {
		return fmt.Errorf("take of %v: taken %v queued %v: %v", subjects, taken, queued, err)
	}
	l.mu.Lock()
	for _, ev := range evs {
		l.ids[ev.ID] = ev.Subject
	}
	l.mu.Unlock()
	l.e.mu.Lock()
	for _, ev := range evs {
		l.e.produced[ev.Subject]++
	}
	l.e.mu.Unlock()
	return nil
}

// TestAggregatorCrashTakesExactlyOnce SIGKILLs the aggregator (live and
// history groups) several times while strict takes queue their events in
// the take streams: the partition owners' take relays publish each event
// once, to its subject's partition, marked counted; history counts every
// take once; the live counters hold the takes' own counts, not counted again.
func TestAggregatorCrashTakesExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{partitions: 4, rules: strictTakeRules, history: true})
	set, err := rules.Parse([]byte(strictTakeRules))
	if err != nil {
		t.Fatal(err)
	}
	taker, err := strict.New(strict.Config{Store: e.store})
	if err != nil {
		t.Fatal(err)
	}
	l := &takeLoad{e: e, taker: taker, set: set, subs: subjects(16), ids: map[string]string{}}
	partOf := func(s string) int {
		return window.Partition(window.Subject{Action: "crash", Kind: "k", Subject: s}, e.partitions)
	}
	covered := map[int]bool{}
	for _, s := range l.subs {
		covered[partOf(s)] = true
	}
	if len(covered) != e.partitions {
		t.Fatalf("subjects fall in %d of %d partitions", len(covered), e.partitions)
	}

	// Takes go on beside the rounds' batches, paced (a load, not a wait),
	// so that kills also land while a relay has a produce request out.
	stop := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if err := l.one(l.pair(i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	stopLoad := sync.OnceFunc(func() { close(stop); <-loadDone })
	t.Cleanup(stopLoad) // a failed round leaves no take behind the test
	const rounds = 3
	p := e.crashRounds(t, rounds, 6, 3, func() { l.take(t, 40) })
	stopLoad()
	// The last process relays what the dead ones left and this batch,
	// and trims the streams behind it.
	l.take(t, 200)
	t.Logf("%d events of takes of two subjects", len(l.ids))

	ctx := context.Background()
	keys := e.store.Keys()
	stacktest.WaitFor(t, "every take stream relayed and trimmed", 60*time.Second, func() bool {
		for part := range e.partitions {
			n, err := e.rdb.XLen(ctx, keys.Takes(part)).Result()
			c, cerr := e.rdb.Get(ctx, keys.TakesRelay(part)).Result()
			if err != nil || cerr != nil || n != 0 || len(strings.Fields(c)) != 2 { // "@<owner> <last>": nothing pending
				return false
			}
		}
		return true
	})
	e.waitPast(60 * time.Second)
	waitHistoryExact(t, e, 30*time.Second)
	// The live group read every relayed event: a counter above the takes
	// would be one counted again.
	e.waitExact("crash", 10*time.Second)

	// The topic holds each take's event once, on its subject's partition,
	// marked counted and naming its take entry.
	seen := map[string]int{}
	err = kafkatopics.New(e.brokers).ReadRange(ctx, e.topic, map[int]int64{}, e.logEnds(), func(m kafka.Message) {
		ev, err := event.Decode(m.Value)
		if err != nil {
			t.Errorf("partition %d offset %d: %v", m.Partition, m.Offset, err)
			return
		}
		h := headers(m)
		if h[event.HeaderCounted] != "1" || !strings.HasPrefix(h[event.HeaderTake], fmt.Sprintf("%d/", m.Partition)) ||
			string(m.Key) != ev.Key() || m.Partition != partOf(ev.Subject) {
			t.Errorf("partition %d offset %d: event %s of %s, key %s, headers %v", m.Partition, m.Offset, ev.ID, ev.Subject, m.Key, h)
		}
		seen[ev.ID]++
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, s := range l.ids {
		if seen[id] != 1 {
			t.Errorf("event %s of %s on the topic %d times, want once", id, s, seen[id])
		}
	}
	for id := range seen {
		if _, ok := l.ids[id]; !ok {
			t.Errorf("event %s on the topic was never taken", id)
		}
	}
	readBacks := 0
	for round := range rounds + 1 {
		b, _ := os.ReadFile(filepath.Join(e.dir, fmt.Sprintf("run%d.log", round)))
		readBacks += strings.Count(string(b), "settled a publish of unknown outcome")
	}
	t.Logf("%d events on the topic once each; %d publishes of unknown outcome settled by read-back", len(seen), readBacks)
	p.stop(t)
	e.checkOffsets()
}
