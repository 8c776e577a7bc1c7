// Command ownermem measures what a write-back aggregator's memory of one
// partition costs (issue 27's goal: RSS per resident subject): it applies N
// distinct subjects, one event each, through the live path's own write-back
// Applier and Headroom (as the live sink does for one partition, with a
// checkpoint every -every batches or -max-pending fields), then reports the subjects held in
// memory (headroom entries and bucket copies), heap and RSS growth, and the
// bytes per resident subject. The Headroom's bound (-max-headroom, the
// sink's default) caps what stays resident: subjects beyond it are
// reloaded from the checkpoint when they come back. It deletes its keys.
//
//	go run ./bench/cmd/ownermem -n 1000000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

const ownerRules = `
rules:
  - name: owner
    action: owner_visit
    kinds: [ip]
    limits: [100/m, 10000/d]
`

func main() {
	n := flag.Int("n", 1_000_000, "distinct subjects, one event each")
	batch := flag.Int("batch", 1000, "events per batch")
	every := flag.Int("every", 50, "batches between checkpoints, or fewer: a partition also checkpoints once -max-pending fields wait")
	maxPending := flag.Int("max-pending", 50_000, "bucket fields pending before a checkpoint (the live sink's default)")
	maxHeadroom := flag.Int("max-headroom", 200_000, "Headroom bound (the live sink's default)")
	addr := flag.String("redis-addr", envOr("FLOODGATE_REDIS_ADDR", "127.0.0.1:16379"), "Redis")
	flag.Parse()
	if err := run(*addr, *n, *batch, *every, *maxPending, *maxHeadroom); err != nil {
		fmt.Fprintln(os.Stderr, "ownermem:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(addr string, n, batchSize, every, maxPending, maxHeadroom int) error {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	prefix := "ownermem" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	defer func() { _ = stacktest.DeletePrefix(context.Background(), rdb, prefix) }()
	store, err := window.NewStore(rdb, window.StoreConfig{Prefix: prefix, Partitions: func() int { return 1 }})
	if err != nil {
		return err
	}
	set, err := rules.Parse([]byte(ownerRules))
	if err != nil {
		return err
	}
	ap, err := live.NewApplier(store, live.ApplierConfig{WriteBack: true})
	if err != nil {
		return err
	}
	hr := live.NewHeadroom(maxHeadroom)
	if _, _, err := ap.Resume(ctx, "g", "t", 0, hr); err != nil {
		return err
	}
	runtime.GC()
	heap0, rss0 := heapInUse(), harness.SelfStatusKiB("VmRSS")<<10
	start := time.Now()
	var off int64
	now := time.Now()
	for i, b := 0, 0; i < n; b++ {
		recs := make([]consume.Record, 0, batchSize)
		for ; i < n && len(recs) < batchSize; i++ {
			recs = append(recs, consume.Record{Offset: off, Event: event.Event{V: 1, ID: event.NewID(), Action: "owner_visit",
				Kind: "ip", Subject: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) + "/" + strconv.Itoa(i>>24), TS: now, N: 1}})
			off++
		}
		bt := consume.Batch{Topic: "t", Partition: 0, First: recs[0].Offset, Last: off - 1, Records: recs}
		if _, err := ap.Apply(ctx, "g", bt, set, now, hr); err != nil {
			return fmt.Errorf("batch %d: %w", b, err)
		}
		if b%every == every-1 || hr.Resident().Pending >= maxPending {
			if _, err := ap.Checkpoint(ctx, "g", "t", 0, hr, now); err != nil {
				return err
			}
		}
	}
	if _, err := ap.Checkpoint(ctx, "g", "t", 0, hr, now); err != nil {
		return err
	}
	took := time.Since(start)
	// What stays: the Go heap after a collection, with the pages it no
	// longer uses given back (the runtime returns them within minutes on
	// its own), plus the Headroom's tables outside the heap.
	debug.FreeOSMemory()
	heap1, rss1 := heapInUse(), harness.SelfStatusKiB("VmRSS")<<10
	peak := harness.SelfStatusKiB("VmHWM") << 10
	resident := hr.Resident()
	per := func(b int64) float64 { return float64(b) / float64(max(resident.Subjects, 1)) }
	fmt.Printf("subjects %d in %s (%.0f/s); resident (headroom entries) %d, bucket copies %d\n", n, took.Round(time.Millisecond), float64(n)/took.Seconds(), resident.Subjects, resident.Copies)
	fmt.Printf("heap in use +%d MiB, outside the heap %d MiB, RSS +%d MiB (peak +%d MiB)\n", (heap1-heap0)>>20, resident.OffHeap>>20, (rss1-rss0)>>20, (peak-rss0)>>20)
	fmt.Printf("per resident subject: heap %.0f B, outside the heap %.0f B, RSS %.0f B (peak %.0f B); per subject streamed: RSS %.0f B\n",
		per(heap1-heap0), per(int64(resident.OffHeap)), per(rss1-rss0), per(peak-rss0), float64(rss1-rss0)/float64(n))
	runtime.KeepAlive(hr)
	return nil
}

func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}
