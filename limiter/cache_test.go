package limiter

import (
	"strconv"
	"testing"
	"time"

	"floodgate/rules"
)

// A full cache stays at its size, keeps what was just put, and prefers to
// evict stale entries; entries live at most the TTL.
func TestDenyCacheBoundedAndTTL(t *testing.T) {
	set := &rules.Set{}
	now := time.Unix(1_800_000_000, 0)
	c := newDenyCache(cacheShards*4, 10*time.Second)
	for i := range 10_000 {
		key := "k" + strconv.Itoa(i)
		c.put(key, Denial{Until: now.Add(time.Duration(1+i%50) * time.Minute)}, set, now)
		if _, ok := c.get(key, set, now); !ok {
			t.Fatalf("put %d: not cached", i)
		}
	}
	if n := c.len(); n > cacheShards*4 {
		t.Fatalf("%d entries, want at most %d", n, cacheShards*4)
	}
	if _, ok := c.get("k9999", set, now.Add(9*time.Second)); !ok {
		t.Fatal("miss within the TTL")
	}
	if _, ok := c.get("k9999", set, now.Add(10*time.Second)); ok {
		t.Fatal("hit after the TTL, want a miss (the denial lasts 50m)")
	}
	// A denial shorter than the TTL ends with itself.
	c.put("short", Denial{Until: now.Add(2 * time.Second)}, set, now)
	if _, ok := c.get("short", set, now.Add(2*time.Second)); ok {
		t.Fatal("hit after the denial ended")
	}
	// Stale entries (another rules set) go before live ones.
	other := &rules.Set{}
	d := newDenyCache(cacheShards, time.Minute) // one entry per shard
	d.put("a", Denial{Until: now.Add(time.Hour)}, other, now)
	s := d.shard("a")
	for i := 0; ; i++ {
		if k := "b" + strconv.Itoa(i); d.shard(k) == s {
			d.put(k, Denial{Until: now.Add(time.Hour)}, set, now)
			if _, ok := d.get(k, set, now); !ok || len(s.m) != 1 {
				t.Fatalf("shard holds %d entries after evicting the stale one", len(s.m))
			}
			break
		}
	}
}
