package limiter

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"floodgate/window"
)

// State is the decision state a limiter answers checks from, in memory:
// every subject the live aggregator last found at half a limit or more
// (window.SubjectState), fed from the partitions' change streams (Sync). A
// subject absent from it is under half of every limit of its rules: a
// check allows it without asking Redis. Safe for concurrent use.
type State struct {
	seed   maphash.Seed
	shards [64]stateShard

	bans banTable // operators' bans (bans.go)

	mu     sync.Mutex
	loaded map[int]bool  // partitions whose snapshot is in
	seq    map[int]int64 // last change applied, per partition
}

type stateShard struct {
	mu sync.RWMutex
	m  map[window.Subject]stateEntry
}

type stateEntry struct {
	partition int
	st        window.SubjectState
	expires   time.Time
}

// NewState returns an empty State.
func NewState() *State {
	s := &State{seed: maphash.MakeSeed(), loaded: map[int]bool{}, seq: map[int]int64{}}
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
	sh := s.shard(sub)
	sh.mu.RLock()
	e, ok := sh.m[sub]
	sh.mu.RUnlock()
	if !ok || !now.Before(e.expires) {
		return window.SubjectState{}, false
	}
	return e.st, true
}

// Reset implements feed.Handler: a partition's snapshot replaces all that
// was known of it.
func (s *State) Reset(partition int, snap window.Snapshot) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for sub, e := range sh.m {
			if e.partition == partition {
				delete(sh.m, sub)
			}
		}
		sh.mu.Unlock()
	}
	for sub, st := range snap.States {
		s.put(partition, sub, st)
	}
	s.bans.reset(partition, snap.Bans)
	s.mu.Lock()
	s.loaded[partition] = true
	s.seq[partition] = snap.Seq
	s.mu.Unlock()
}

// Apply implements feed.Handler.
func (s *State) Apply(partition int, c window.Change) {
	for _, sc := range c.States {
		if sc.State == nil {
			sh := s.shard(sc.Subject)
			sh.mu.Lock()
			delete(sh.m, sc.Subject)
			sh.mu.Unlock()
			continue
		}
		s.put(partition, sc.Subject, *sc.State)
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

func (s *State) put(partition int, sub window.Subject, st window.SubjectState) {
	sh := s.shard(sub)
	sh.mu.Lock()
	sh.m[sub] = stateEntry{partition: partition, st: st, expires: st.Expires()}
	sh.mu.Unlock()
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
			if !now.Before(e.expires) {
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
