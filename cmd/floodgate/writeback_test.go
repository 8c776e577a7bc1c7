package main

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// A deny rule beside the counting one: a subject over it moves the
// decisions offset D with every batch, while write-back keeps its counts
// in memory until the next checkpoint C.
const decideRules = countRules + `  - name: deny
    action: crash
    kinds: [k]
    limits: [5/1m]
`

// TestAggregatorKillBetweenDecisionAndCheckpoint SIGKILLs a write-back
// aggregator once Redis holds decisions past its checkpoint (D > C) on a
// partition — counts for those events exist only in the dead process's
// memory — and checks that the next one replays C..D and ends exact.
func TestAggregatorKillBetweenDecisionAndCheckpoint(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 3, decideRules)
	ctx := context.Background()
	w := e.writer()
	defer w.Close()
	subs := subjects(9)

	// No checkpoint but the first while it runs.
	p := e.run("slow", "--metrics-addr", "127.0.0.1:0", "--no-history", "--checkpoint-interval", "1h")
	sent := 0
	var ahead []string
	stacktest.WaitFor(t, "decisions past the checkpoint", 90*time.Second, func() bool {
		e.produce(ctx, w, "crash", subs, 45, sent)
		sent += 45
		ahead = e.decisionsAhead(ctx)
		return len(ahead) > 0
	})
	p.kill(t)
	t.Logf("SIGKILLed with decisions past the checkpoint: %v", ahead)

	q := e.start("after")
	e.produce(ctx, w, "crash", subs, 90, sent)
	e.waitExact("crash", 90*time.Second)
	body, err := httpGet(metricsAddr(t, e, q.name))
	if err != nil {
		t.Fatal(err)
	}
	if n := metricValue(body, "floodgate_live_replayed_events_total", ""); n == 0 {
		t.Fatal("the next aggregator replayed nothing between the checkpoint and the decisions offset")
	}
	q.stop(t)
	e.checkOffsets()
}

// decisionsAhead lists the partitions whose decisions offset D stands past
// their checkpoint C, as "pN C..D".
func (e *liveEnv) decisionsAhead(ctx context.Context) []string {
	e.t.Helper()
	var out []string
	for part := range e.partitions {
		keys := e.store.Keys()
		c, cerr := e.rdb.Get(ctx, keys.Checkpoint(e.group, e.topic, part)).Int64()
		d, derr := e.rdb.Get(ctx, keys.Offset(e.group, e.topic, part)).Int64()
		if errors.Is(cerr, redis.Nil) || errors.Is(derr, redis.Nil) {
			continue
		}
		if cerr != nil || derr != nil {
			e.t.Fatal(errors.Join(cerr, derr))
		}
		if d > c {
			out = append(out, "p"+strconv.Itoa(part)+" "+strconv.FormatInt(c, 10)+".."+strconv.FormatInt(d, 10))
		}
	}
	return out
}
