package limiter

import (
	"hash/maphash"
	"sync"
	"time"

	"floodgate/rules"
)

const cacheShards = 32

// denyCache holds deny decisions until each expires, so that a flood from a
// denied subject does not reach Redis. It is a size-capped map in shards:
// when a shard is full, expired entries go first, then arbitrary ones (Go's
// map order). An entry holds for the rules set it was decided under only; a
// reload makes it a miss.
type denyCache struct {
	seed     maphash.Seed
	perShard int
	shards   [cacheShards]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]cacheEntry
}

type cacheEntry struct {
	d   Denial
	set *rules.Set
}

func newDenyCache(size int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), perShard: max(size/cacheShards, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]cacheEntry)
	}
	return c
}

func (c *denyCache) shard(key string) *cacheShard {
	return &c.shards[maphash.String(c.seed, key)%cacheShards]
}

// get returns the cached denial of key if it was decided under set and has
// not expired at now.
func (c *denyCache) get(key string, set *rules.Set, now time.Time) (Denial, bool) {
	s := c.shard(key)
	s.mu.RLock()
	e, ok := s.m[key]
	s.mu.RUnlock()
	if !ok {
		return Denial{}, false
	}
	if e.set != set || !now.Before(e.d.Until) {
		s.mu.Lock()
		if cur, ok := s.m[key]; ok && cur == e {
			delete(s.m, key)
		}
		s.mu.Unlock()
		return Denial{}, false
	}
	return e.d, true
}

// put caches d (which ends at d.Until) for key.
func (c *denyCache) put(key string, d Denial, set *rules.Set, now time.Time) {
	if !now.Before(d.Until) {
		return
	}
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; !ok && len(s.m) >= c.perShard {
		for k, e := range s.m {
			if !now.Before(e.d.Until) || e.set != set {
				delete(s.m, k)
			}
		}
		for k := range s.m {
			if len(s.m) < c.perShard {
				break
			}
			delete(s.m, k)
		}
	}
	s.m[key] = cacheEntry{d: d, set: set}
}

func (c *denyCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
