package live_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/stacktest"

	"github.com/redis/go-redis/v9"
)

// BenchmarkStoreApply measures the live sink's Redis side: batches of 1000
// events under the design notes' login rule (2/s, 5/m, 10/h, 100/d), from a
// pool of subjects with Zipf-distributed activity. It reports events/s,
// Redis commands per event (INFO commandstats deltas, script-internal calls
// included; the EVALSHA itself is one) and Redis CPU per event (INFO cpu).
// Nearly every subject of this mix is near a limit in every batch: it
// measures the verdicts' cost, which write-back does not remove.
//
//	go test ./live -run '^$' -bench StoreApply -benchtime 200x
func BenchmarkStoreApply(b *testing.B) {
	for _, tc := range []struct {
		name     string
		subjects uint64
		headroom bool // as the live sink: evaluate only subjects a batch can bring near a limit
		// writeBack counts in memory and checkpoints after every batch (a
		// second of its events)
		writeBack bool
	}{
		{"subjects=100", 100, false, false},
		{"subjects=10k", 10_000, false, false},
		{"subjects=10k/headroom", 10_000, true, false},
		{"subjects=10k/write-back", 10_000, true, true},
		{"subjects=1M", 1_000_000, false, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rdb := stacktest.Redis(b)
			st := newStore(b, rdb)
			set := mustRules(b, loginRules)
			rng := rand.New(rand.NewPCG(1, 2))
			zipf := rand.NewZipf(rng, 1.1, 1, tc.subjects-1)
			const batchSize = 1000
			clock := time.Now()
			batches := make([]consume.Batch, 0, 64)
			bt := &batcher{Topic: "bench"}
			for i := 0; i < cap(batches); i++ {
				evs := make([]event.Event, batchSize)
				for k := range evs {
					clock = clock.Add(time.Millisecond)
					evs[k] = ev("login_failed", "ip", "10."+strconv.FormatUint(zipf.Uint64(), 10), clock)
				}
				batches = append(batches, bt.Batch(evs...))
			}
			var hr *live.Headroom
			if tc.headroom {
				hr = live.NewHeadroom(1 << 20)
			}
			ctx := context.Background()
			ap, err := live.NewApplier(st, live.ApplierConfig{WriteBack: tc.writeBack})
			if err != nil {
				b.Fatal(err)
			}
			calls0, cpu0 := stacktest.RedisCalls(b, rdb), redisCPU(b, rdb)
			var evaluated, mirrored, touched int
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				// Re-apply the prepared batches with fresh offsets.
				src := batches[i%len(batches)]
				bb := consume.Batch{Topic: bt.Topic, Partition: bt.Partition}
				bb.First, bb.Last = bt.Next, bt.Next+int64(len(src.Records))-1
				bb.Records = make([]consume.Record, len(src.Records))
				for k, r := range src.Records {
					r.Offset = bb.First + int64(k)
					bb.Records[k] = r
				}
				bt.Next = bb.Last + 1
				now := src.Records[len(src.Records)-1].Event.TS
				res, err := ap.Apply(ctx, "bench", bb, set, now, hr)
				if err != nil {
					b.Fatal(err)
				}
				if tc.writeBack {
					if _, err := ap.Checkpoint(ctx, "bench", bt.Topic, bt.Partition, hr, now); err != nil {
						b.Fatal(err)
					}
				}
				evaluated += res.Evaluated
				mirrored += res.Mirrored
				touched += res.Subjects
			}
			elapsed := time.Since(start)
			b.StopTimer()
			cpu := redisCPU(b, rdb) - cpu0
			calls := stacktest.RedisCalls(b, rdb) - calls0 - 2 // less our own INFOs
			events := float64(b.N * batchSize)
			b.ReportMetric(cpu.Seconds()*1e6/events, "redis-cpu-µs/event")
			b.ReportMetric(events/elapsed.Seconds(), "events/s")
			b.ReportMetric(float64(calls)/events, "redis-cmds/event")
			b.ReportMetric(float64(touched)/float64(b.N), "subjects/batch")
			b.ReportMetric(float64(evaluated)/float64(b.N), "evaluated/batch")
			if tc.headroom {
				b.ReportMetric(float64(mirrored)/float64(b.N), "from-copies/batch")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// redisCPU is the Redis server's CPU time so far (used_cpu_user + sys).
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sec float64
	for _, line := range strings.Split(info, "\n") {
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				sec += f
			}
		}
	}
	return time.Duration(sec * float64(time.Second))
}
