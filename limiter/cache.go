package limiter

import (
	"hash/maphash"
	"sync"
	"time"

	"floodgate/rules"
)

const (
	cacheShards = 32
	// evictSamples bounds the entries a put into a full shard looks at.
	evictSamples = 8
)

// denyCache holds deny decisions so that a flood from a denied subject does
// not reach Redis. An entry lives until its denial ends or ttl has passed,
// whichever is first: a deny record an operator deletes stops denying
// within ttl. It is a size-capped map in shards: a put into a full shard
// looks at a few entries (Go's map order starts at a random place) and
// evicts the first stale one (expired, or of an older rules set), else the
// one that expires soonest. An entry holds for the rules set it was decided
// under only; a reload makes it a miss.
type denyCache struct {
	seed     maphash.Seed
	perShard int
	ttl      time.Duration
	shards   [cacheShards]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]cacheEntry
}

type cacheEntry struct {
	d   Denial
	set *rules.Set
	exp time.Time // min(d.Until, cached at + ttl)
}

func newDenyCache(size int, ttl time.Duration) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), perShard: max(size/cacheShards, 1), ttl: ttl}
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
	if e.set != set || !now.Before(e.exp) {
		s.mu.Lock()
		if cur, ok := s.m[key]; ok && cur == e {
			delete(s.m, key)
		}
		s.mu.Unlock()
		return Denial{}, false
	}
	return e.d, true
}

// put caches d (which ends at d.Until) for key, for at most the cache's ttl.
func (c *denyCache) put(key string, d Denial, set *rules.Set, now time.Time) {
	if !now.Before(d.Until) {
		return
	}
	exp := d.Until
	if lim := now.Add(c.ttl); lim.Before(exp) {
		exp = lim
	}
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; !ok && len(s.m) >= c.perShard {
		var victim string
		var soonest time.Time
		n := 0
		for k, e := range s.m {
			if e.set != set || !now.Before(e.exp) {
				victim = k
				break
			}
			if n == 0 || e.exp.Before(soonest) {
				victim, soonest = k, e.exp
			}
			if n++; n == evictSamples {
				break
			}
		}
		delete(s.m, victim)
	}
	s.m[key] = cacheEntry{d: d, set: set, exp: exp}
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
