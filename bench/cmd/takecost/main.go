// Command takecost measures what one strict take costs Redis: the CPU
// Redis spends (INFO cpu, user + sys) per take of one subject under two
// limits (1m and 1h, as make bench's bench_strict rule), sent one script
// run at a time by one client, at 1, 4 and 16 takes per run, with and
// without the take's event queued in the take stream. Nothing else should
// use that Redis meanwhile. It deletes its keys at the end.
//
//	go run ./bench/cmd/takecost -n 4000
//
// docs/profiles.md ("A strict take") has the figures.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

func main() {
	addr := flag.String("addr", envOr("FLOODGATE_REDIS_ADDR", "127.0.0.1:6379"), "Redis address (nothing else should use it during the run)")
	n := flag.Int("n", 4000, "takes per measurement")
	flag.Parse()
	if err := run(context.Background(), *addr, *n); err != nil {
		fmt.Fprintln(os.Stderr, "takecost:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, n int) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	prefix := "takecost" + strconv.FormatInt(time.Now().UnixNano(), 36)
	st, err := window.NewStore(rdb, window.StoreConfig{Prefix: prefix, Partitions: func() int { return 1 }})
	if err != nil {
		return err
	}
	defer func() { _ = stacktest.DeletePrefix(context.WithoutCancel(ctx), rdb, prefix) }()
	lims := []window.EvalLimit{
		{Limit: rules.Limit{Count: 1e9, Window: time.Minute}, Block: true},
		{Limit: rules.Limit{Count: 1e9, Window: time.Hour}, Block: true},
	}
	fmt.Println("| takes per script run | event queued | Redis CPU per take | wall per take | commands a take's script calls | script time beyond them |\n|--:|---|--:|--:|--:|--:|")
	for _, per := range []int{1, 4, 16} {
		for _, queue := range []bool{false, true} {
			before, err := harness.ReadRedisInfo(ctx, rdb)
			if err != nil {
				return err
			}
			start := time.Now()
			for i := 0; i < n; i += per {
				run := window.SlotTakes{Partition: 0, Now: time.Now()}
				for k := i; k < i+per; k++ {
					run.Reqs = append(run.Reqs, take(k, lims, queue))
				}
				if _, errs := st.TakeSlots(ctx, []window.SlotTakes{run}); errs[0] != nil {
					return errs[0]
				}
			}
			wall := time.Since(start)
			after, err := harness.ReadRedisInfo(ctx, rdb)
			if err != nil {
				return err
			}
			// Scripts' own time includes the commands they call, which
			// commandstats also counts under their names.
			inner := float64(after.TotalCalls("info", "evalsha", "eval") - before.TotalCalls("info", "evalsha", "eval"))
			script := after.TotalUsec("evalsha") - before.TotalUsec("evalsha")
			var called int64
			for name, us := range after.Usec {
				if name != "info" && name != "evalsha" && name != "eval" {
					called += us - before.Usec[name]
				}
			}
			fmt.Printf("| %d | %v | %.0f µs | %.0f µs | %.1f | %.0f µs |\n", per, queue,
				(after.CPU-before.CPU)*1e6/float64(n), float64(wall.Microseconds())/float64(n),
				inner/float64(n), float64(script-called)/float64(n))
		}
	}
	return nil
}

// take is the k-th take: one of 10 000 subjects, as make bench spreads them.
func take(k int, lims []window.EvalLimit, queue bool) window.TakeRequest {
	sub := window.Subject{Action: "bench_strict", Kind: "email", Subject: "s" + strconv.Itoa(k%10_000) + "@example.com"}
	q := window.EvalQuery{Subject: sub, MaxWindow: time.Hour, Limits: lims, Count: true, BlockRules: []string{"bench-strict"}}
	req := window.TakeRequest{Queries: []window.EvalQuery{q}, N: 1}
	if queue {
		v := `{"v":1,"id":"take-` + strconv.Itoa(k) + `","action":"bench_strict","kind":"email","subject":"` + sub.Subject + `","ts":1800000000000,"n":1}`
		req.Events = []window.QueuedEvent{{Key: []byte("email:" + sub.Subject), Value: []byte(v)}}
	}
	return req
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
