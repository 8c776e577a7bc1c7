package backtest

import (
	"container/heap"
	"time"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// expirer deletes a partition's bucket hashes when the replay's clock
// passes the time live Redis would have expired them (docs/redis.md: the
// end of the bucket's period plus the subject's longest window plus the
// slack). Redis expires keys on its own wall clock, which a replay runs
// far ahead of: without this, a replay of days would keep every bucket of
// every subject it saw until it ends. No window can read a bucket past that
// time, so deleting it changes no count. Other keys of a subject (distinct
// sets, bucket arrival times, deny records: one each) stay until the end.
type expirer struct {
	keys  window.Keys
	part  int
	rules *rules.Set
	slack int64 // seconds
	maxw  map[actionKind]int64
	known map[bucketRef]struct{}
	queue refQueue
}

type actionKind struct{ action, kind string }

// bucketRef names one bucket hash: a subject's level ('s', 'm', 'h') and
// period number (minute, hour or day since the epoch).
type bucketRef struct {
	sub   window.Subject
	level byte
	n     int64
}

func newExpirer(keys window.Keys, part int, set *rules.Set, slack time.Duration) *expirer {
	return &expirer{keys: keys, part: part, rules: set, slack: int64(slack / time.Second),
		maxw: map[actionKind]int64{}, known: map[bucketRef]struct{}{}}
}

// touch notes the bucket hashes a batch applied at second now wrote.
func (e *expirer) touch(b consume.Batch, now int64) {
	for i := range b.Records {
		ev := &b.Records[i].Event
		ak := actionKind{ev.Action, ev.Kind}
		maxw, ok := e.maxw[ak]
		if !ok {
			maxw = int64(e.rules.MaxWindowFor(ev.Action, ev.Kind) / time.Second)
			e.maxw[ak] = maxw
		}
		sec := floorDiv(ev.TS.UnixMilli(), 1000)
		if maxw == 0 || sec <= now-maxw {
			continue // not counted (no rule, too old): nothing written
		}
		// the bucket keys of the subject as the store counts it (an e-mail
		// normalized, IPv6 by prefix), not of the spelling the event carried
		sub := window.Subject{Action: ev.Action, Kind: ev.Kind, Subject: e.rules.Subject(ev.Kind, ev.Subject)}
		// Levels and lifetimes as the apply script writes them.
		lv := window.Levels(maxw)
		for k := 0; k < len(lv); k++ {
			e.add(sub, lv[k], sec, maxw)
		}
	}
}

// add notes the bucket of level holding second sec.
func (e *expirer) add(sub window.Subject, level byte, sec, maxw int64) {
	p := window.LevelSpan(level)
	r := bucketRef{sub, level, floorDiv(sec, p)}
	if _, ok := e.known[r]; ok {
		return
	}
	e.known[r] = struct{}{}
	heap.Push(&e.queue, pendingRef{at: (r.n+1)*p + maxw + e.slack, ref: r})
}

// due returns the keys whose time has come at second now, and forgets them.
func (e *expirer) due(now int64) []string {
	var out []string
	for len(e.queue) > 0 && e.queue[0].at <= now {
		p := heap.Pop(&e.queue).(pendingRef)
		delete(e.known, p.ref)
		out = append(out, e.keys.Bucket(e.part, p.ref.sub, p.ref.level, time.Unix(p.ref.n*window.LevelSpan(p.ref.level), 0)))
	}
	return out
}

type pendingRef struct {
	at  int64
	ref bucketRef
}

// refQueue is a min-heap of pending deletions by time.
type refQueue []pendingRef

func (q refQueue) Len() int           { return len(q) }
func (q refQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q refQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *refQueue) Push(x any)        { *q = append(*q, x.(pendingRef)) }
func (q *refQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
