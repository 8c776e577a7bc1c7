package decide

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/internal/window"
)

// State is the decision state a limiter answers checks from, in memory:
// every subject the live aggregator last found at half a limit or more
// (window.SubjectState), fed from the partitions' change streams (Sync). A
// subject absent from it is under half of every limit of its rules: a
// check allows it without asking Redis — unless the state is over its cap
// (NewBoundedState), when absent means only "not held" and the limiter
// reads such a subject from Redis (Lookup). Safe for concurrent use.
type State struct {
	seed   maphash.Seed
	shards [stateShards]stateShard
	// shardCap bounds each shard's subjects (0: unbounded): the subjects
	// spread evenly over shards by hash, so a bound per shard is the cap
	// without a global lock.
	shardCap int
	capacity int

	// gapUntil (Unix ns) is when the last state the cap left out stops
	// saying anything: until then a subject not held may have a state in
	// Redis, so absence proves nothing.
	gapUntil atomic.Int64
	overflow atomic.Uint64 // states left out or evicted by the cap

	names intern // actions, kinds and rule names shared by every entry

	bans banTable // operators' bans (bans.go)

	mu     sync.Mutex
	loaded map[int]bool   // partitions whose snapshot is in
	seq    map[int]int64  // last change applied, per partition
	gen    map[int]uint32 // snapshot generation, per partition
}

const stateShards = 64

type stateShard struct {
	mu sync.RWMutex
	m  map[window.Subject]stateEntry
}

// stateEntry is one held subject. It is kept small: there may be millions
// (docs/limiter.md has the bytes per subject).
type stateEntry struct {
	st        window.SubjectState
	expires   int64  // Unix ns from which st says nothing
	partition int32  // the partition whose stream holds it
	gen       uint32 // the partition's snapshot generation that wrote it
}

// blocks reports whether the state says one more event does not fit a
// limit or bucket: the entries a cap must keep first, since a check then
// denies from memory without a Redis read.
func (e *stateEntry) blocks() bool { return e.st.Blocks() }

// NewState returns an empty State without a bound on the subjects held.
func NewState() *State { return NewBoundedState(0) }

// NewBoundedState returns an empty State holding at most about
// maxSubjects subjects (0: no bound). Past the bound, blocking states are
// kept before the others, and a subject the state does not hold is
// answered by an exact read from Redis (Lookup) until every state it left
// out has expired: the bound costs Redis reads, never a forgotten deny.
func NewBoundedState(maxSubjects int) *State {
	s := &State{seed: maphash.MakeSeed(), loaded: map[int]bool{}, seq: map[int]int64{}, gen: map[int]uint32{}}
	if maxSubjects > 0 {
		s.capacity = maxSubjects
		s.shardCap = max(1, (maxSubjects+stateShards-1)/stateShards)
	}
	for i := range s.shards {
		s.shards[i].m = map[window.Subject]stateEntry{}
	}
	return s
}

func (s *State) shard(sub window.Subject) *stateShard {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(sub.Action)
	h.WriteByte(0)
	h.WriteString(sub.Kind)
	h.WriteByte(0)
	h.WriteString(sub.Subject)
	return &s.shards[h.Sum64()%uint64(len(s.shards))]
}

// Get returns sub's state when it says something at now.
func (s *State) Get(sub window.Subject, now time.Time) (window.SubjectState, bool) {
	st, ok, _ := s.Lookup(sub, now)
	return st, ok
}

// Lookup returns sub's state when it holds one that says something at now
// (held); known is true when the answer is complete: held, or sub has no
// state in Redis either. known is false only past the cap, for a subject
// not held while a state the cap left out may still say something: the
// caller must read sub from Redis.
func (s *State) Lookup(sub window.Subject, now time.Time) (st window.SubjectState, held, known bool) {
	sh := s.shard(sub)
	sh.mu.RLock()
	e, ok := sh.m[sub]
	sh.mu.RUnlock()
	if ok && now.UnixNano() < e.expires {
		return e.st, true, true
	}
	return window.SubjectState{}, false, now.UnixNano() >= s.gapUntil.Load()
}

// Complete reports whether every state that says something at now is held:
// false past the cap (see Lookup).
func (s *State) Complete(now time.Time) bool { return now.UnixNano() >= s.gapUntil.Load() }

// Cap is the bound of NewBoundedState, 0 for none.
func (s *State) Cap() int { return s.capacity }

// Overflows is the number of states the cap left out or evicted.
func (s *State) Overflows() uint64 { return s.overflow.Load() }

// Reset implements feed.Handler: a partition's snapshot replaces all that
// was known of it. The snapshot's states go in over the old ones first and
// only then are the partition's states that it does not hold dropped, so a
// subject held before and after is never absent in between (an absent
// subject would be allowed).
func (s *State) Reset(partition int, snap window.Snapshot) {
	s.mu.Lock()
	s.gen[partition]++
	gen := s.gen[partition]
	s.mu.Unlock()
	for sub, st := range snap.States {
		s.put(partition, gen, sub, st)
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for sub, e := range sh.m {
			if int(e.partition) == partition && e.gen != gen {
				delete(sh.m, sub)
			}
		}
		sh.mu.Unlock()
	}
	if snap.Omitted > 0 {
		// The snapshot was bounded to the cap: what it left out is in
		// Redis, and absent subjects prove nothing until it expires.
		s.leftOut(snap.Omitted, snap.OmittedUntil.UnixNano())
	}
	s.bans.reset(partition, snap.Bans)
	s.mu.Lock()
	s.loaded[partition] = true
	s.seq[partition] = snap.Seq
	s.mu.Unlock()
}

// Apply implements feed.Handler.
func (s *State) Apply(partition int, c window.Change) {
	s.mu.Lock()
	gen := s.gen[partition]
	s.mu.Unlock()
	for _, sc := range c.States {
		if sc.State == nil {
			sh := s.shard(sc.Subject)
			sh.mu.Lock()
			delete(sh.m, sc.Subject)
			sh.mu.Unlock()
			continue
		}
		s.put(partition, gen, sc.Subject, *sc.State)
	}
	s.bans.apply(partition, c.Bans)
	s.mu.Lock()
	s.seq[partition] = c.Seq
	s.mu.Unlock()
}

// Seq returns the sequence number of the last change of a partition the
// state holds: it has caught up with every batch whose change entry has a
// number at most that.
func (s *State) Seq(partition int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq[partition]
}

// evictScan bounds the entries a full shard looks at for one to evict.
const evictScan = 16

func (s *State) put(partition int, gen uint32, sub window.Subject, st window.SubjectState) {
	sub.Action, sub.Kind = s.names.get(sub.Action), s.names.get(sub.Kind)
	for i := range st.Limits {
		st.Limits[i].Rule = s.names.get(st.Limits[i].Rule)
	}
	for i := range st.Buckets {
		st.Buckets[i].Rule = s.names.get(st.Buckets[i].Rule)
	}
	e := stateEntry{st: st, expires: st.Expires().UnixNano(), partition: int32(partition), gen: gen}
	sh := s.shard(sub)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[sub]; ok || s.shardCap == 0 || len(sh.m) < s.shardCap {
		sh.m[sub] = e
		return
	}
	// Full. A state already over by the aggregator's clock (the sweeper's
	// to drop) gives its place, and a blocking state takes the place of one
	// that does not block; whatever is not held widens the gap during which
	// absent subjects are read from Redis.
	at, blocks := st.At.UnixNano(), e.blocks()
	n := 0
	for victim, ve := range sh.m {
		if ve.expires <= at || (blocks && !ve.blocks()) {
			delete(sh.m, victim)
			if ve.expires > at {
				s.leftOut(1, ve.expires)
			}
			sh.m[sub] = e
			return
		}
		if n++; n == evictScan {
			break
		}
	}
	s.leftOut(1, e.expires)
}

// leftOut records n states the cap does not hold, the last saying
// something until expires (Unix ns).
func (s *State) leftOut(n int, expires int64) {
	s.overflow.Add(uint64(n))
	for {
		cur := s.gapUntil.Load()
		if expires <= cur || s.gapUntil.CompareAndSwap(cur, expires) {
			return
		}
	}
}

// intern shares the strings of few distinct values (actions, kinds, rule
// names) among entries instead of one copy each; bounded, since the values
// come from the change stream.
type intern struct {
	mu sync.RWMutex
	m  map[string]string
}

const maxInterned = 4096

func (t *intern) get(s string) string {
	t.mu.RLock()
	v, ok := t.m[s]
	t.mu.RUnlock()
	if ok {
		return v
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]string{}
	}
	if len(t.m) >= maxInterned {
		return s
	}
	t.m[s] = s
	return s
}

// Loaded reports whether the snapshots of partitions 0..n-1 are in.
func (s *State) Loaded(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range n {
		if !s.loaded[p] {
			return false
		}
	}
	return n > 0
}

// Len is the number of subjects held (expired ones until the next sweep).
func (s *State) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// Sweep drops the subjects whose state says nothing any more at now, and
// the bans that ended.
func (s *State) Sweep(now time.Time) {
	s.bans.sweep(now)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for sub, e := range sh.m {
			if now.UnixNano() >= e.expires {
				delete(sh.m, sub)
			}
		}
		sh.mu.Unlock()
	}
}

// RunSweeper sweeps every interval until ctx ends.
func (s *State) RunSweeper(ctx context.Context, interval time.Duration, now func() time.Time) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Sweep(now())
		}
	}
}
