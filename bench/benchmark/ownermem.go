package benchmark

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
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

// OwnerMemory is what MeasureOwnerMemory reports of a write-back owner's
// memory: one partition, one event each for Subjects distinct subjects.
type OwnerMemory struct {
	Subjects, Resident, Copies int
	// Per resident subject, bytes: Go heap, mapped outside it, RSS after
	// the heap's free pages are returned, and peak RSS (VmHWM).
	Heap, OffHeap, RSS, Peak float64
	Cmd                      string
}

var (
	ownerResident = regexp.MustCompile(`resident \(headroom entries\) (\d+), bucket copies (\d+)`)
	ownerPer      = regexp.MustCompile(`per resident subject: heap (\d+) B, outside the heap (\d+) B, RSS (\d+) B \(peak (\d+) B\)`)
)

// ownerMemory runs `floodbench owner-memory` (this binary) in a process of
// its own (RSS is the process's) against the bench's Redis.
func (b *bench) ownerMemory(ctx context.Context) error {
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("ownermem: the running binary: %w", err)
	}
	n := b.cfg.OwnerSubjects
	args := []string{"owner-memory", "--subjects", strconv.Itoa(n), "--redis-addr", b.cfg.RedisAddr}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ownermem: %w: %s", err, out)
	}
	res, per := ownerResident.FindSubmatch(out), ownerPer.FindSubmatch(out)
	if res == nil || per == nil {
		return fmt.Errorf("ownermem: unexpected output: %s", out)
	}
	m := OwnerMemory{Subjects: n, Cmd: "floodbench owner-memory --subjects " + strconv.Itoa(n)}
	m.Resident, _ = strconv.Atoi(string(res[1]))
	m.Copies, _ = strconv.Atoi(string(res[2]))
	for i, f := range []*float64{&m.Heap, &m.OffHeap, &m.RSS, &m.Peak} {
		*f, _ = strconv.ParseFloat(string(per[i+1]), 64)
	}
	b.res.Owner = &m
	return nil
}

// OwnerMemoryConfig is what MeasureOwnerMemory applies: N distinct subjects,
// one event each, in batches of Batch, through the live path's write-back
// Applier and Headroom of one partition, checkpointed every Every batches
// or once MaxPending fields wait (as the live sink does), the Headroom
// bounded by MaxHeadroom (the sink's default): subjects beyond it are
// reloaded from the checkpoint when they come back.
type OwnerMemoryConfig struct {
	RedisAddr                                string
	N, Batch, Every, MaxPending, MaxHeadroom int
}

// MeasureOwnerMemory measures what a write-back aggregator's memory of one
// partition costs (RSS per resident subject) and writes the subjects held
// in memory (headroom entries and bucket copies), heap and RSS growth and
// the bytes per resident subject to w. It deletes its keys. It measures the
// process it runs in: floodbench owner-memory runs it in a process of its
// own.
func MeasureOwnerMemory(ctx context.Context, w io.Writer, c OwnerMemoryConfig) error {
	addr, n, batchSize, every, maxPending, maxHeadroom := c.RedisAddr, c.N, c.Batch, c.Every, c.MaxPending, c.MaxHeadroom
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
				Kind: "ip", Subject: ownerSubject(i), TS: now, N: 1}})
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
	fmt.Fprintf(w, "subjects %d in %s (%.0f/s); resident (headroom entries) %d, bucket copies %d\n", n, took.Round(time.Millisecond), float64(n)/took.Seconds(), resident.Subjects, resident.Copies)
	fmt.Fprintf(w, "heap in use +%d MiB, outside the heap %d MiB, RSS +%d MiB (peak +%d MiB)\n", (heap1-heap0)>>20, resident.OffHeap>>20, (rss1-rss0)>>20, (peak-rss0)>>20)
	fmt.Fprintf(w, "per resident subject: heap %.0f B, outside the heap %.0f B, RSS %.0f B (peak %.0f B); per subject streamed: RSS %.0f B\n",
		per(heap1-heap0), per(int64(resident.OffHeap)), per(rss1-rss0), per(peak-rss0), float64(rss1-rss0)/float64(n))
	runtime.KeepAlive(hr)
	return nil
}

func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// ownerSubject is the i-th distinct IPv4 address from 10.0.0.0 on. (It was
// "10.a.b.c/<i>>24>": kind ip normalizes a prefix, so every subject became
// 0.0.0.0/0 and the step measured one resident subject.)
func ownerSubject(i int) string {
	return fmt.Sprintf("%d.%d.%d.%d", 10+i>>24, i>>16&255, i>>8&255, i&255)
}
