package attack

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/producer"
)

// The fetch-of-bombs attack: records each under the batch bound but many
// to a fetch.
const (
	fetchBombs    = 60
	fetchBombSize = 15 << 19 // 7.5 MiB
	readAhead     = 16 << 20 // --read-ahead-bytes, each fetch's budget too
)

// fetchPathBound is what the fetch path may hold per assigned partition
// and group (docs/operations.md, "The bound whatever the producers
// write"): a response as it came (the fetch size, 1 MiB) and the buffer
// one batch is inflated into (8 MiB and a little room: 10 MiB with the
// response), the records of the fetch being read and of those waiting for
// the apply loop (the read-ahead bound each), and the batch being applied
// (twice the bound: it gathers responses until it holds the bound).
const fetchPathBound = 10<<20 + 4*readAhead

// aggregatorRSSBound is the aggregator's documented peak RSS under the
// attack: its RSS once started and idle, and twice (the collector's
// headroom) the fetch path's bound for each of its two groups (live and
// history) on the topic's one partition.
func aggregatorRSSBound(idle int64) int64 { return idle + 2*2*1*fetchPathBound }

// fetchOfBombs: sixty records of 7.5 MiB of spaces, each a zstd batch of
// its own (about a KB on the wire), then events of one IP over its limit,
// all written while the aggregator is stopped, so that its first fetch
// finds every bomb in one response. kafka-go's Client.Fetch inflated the
// whole response before handing any record over: about a GB. The
// aggregator must stay alive within its memory bound, dead-letter each
// record as a stub, and deny the IP behind them.
func fetchOfBombs(ctx context.Context, e *env) (Row, error) {
	row := Row{Tried: fmt.Sprintf("%d records of 7.5 MiB (about 1 KB each on the wire: a zstd batch each, under the 8 MiB batch bound), "+
		"then 3 events of one IP over 2/h, in one partition, written while the aggregator was stopped", fetchBombs)}
	rules, err := e.writeRules(loginRules)
	if err != nil {
		return row, err
	}
	// Its RSS idle, once started: the base of the bound.
	first, err := e.startAggregator(ctx, rules)
	if err != nil {
		return row, err
	}
	idle := first.PeakRSS()
	if err := first.Stop(20 * time.Second); err != nil {
		return row, fmt.Errorf("stop the idle aggregator: %w", err)
	}
	const ip = "203.0.113.21"
	key := []byte(event.Event{Kind: "ip", Subject: ip}.Key())
	// A transport of its own: the default one is shared by every writer
	// of the process, and its metadata (cached 6 s) may predate this
	// scenario's topic, which its retries would not outlast.
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(e.cfg.Brokers...), Topic: e.topic, Compression: kafka.Zstd, Transport: tr,
		BatchBytes: fetchBombSize + 1<<20, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	value := bytes.Repeat([]byte{' '}, fetchBombSize)
	for i := range fetchBombs {
		if err := w.WriteMessages(ctx, kafka.Message{Key: key, Value: value}); err != nil {
			_ = w.Close()
			return row, fmt.Errorf("write bomb %d: %w", i, err)
		}
	}
	if err := w.Close(); err != nil {
		return row, err
	}
	pub, err := producer.New(producer.Config{Brokers: e.cfg.Brokers, Topic: e.topic})
	if err != nil {
		return row, err
	}
	now := time.Now()
	evs := make([]event.Event, 3)
	for i := range evs {
		evs[i] = event.Event{ID: fmt.Sprintf("%s-fb-%d", e.id, i), Action: "login_failed", Kind: "ip", Subject: ip, TS: now}
	}
	err = pub.Publish(ctx, evs...)
	if cerr := pub.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return row, fmt.Errorf("publish: %w", err)
	}

	agg, err := e.startAggregator(ctx, rules)
	if err != nil {
		return row, err
	}
	l, err := e.startLimiter(ctx, rules, e.cfg.RedisAddr)
	if err != nil {
		return row, err
	}
	denied := waitFor(ctx, "the IP behind the records denied", 3*time.Minute, func() (bool, error) {
		if !agg.Alive() {
			return false, errExited
		}
		c, err := status(ctx, http.MethodGet, "http://"+l.http+"/v1/check?action=login_failed&ip="+ip, nil)
		return c == http.StatusTooManyRequests, err
	}) == nil
	var lag int64 = -1
	if err := waitFor(ctx, "committed lag 0", time.Minute, func() (bool, error) {
		var err error
		lag, err = e.lag(ctx)
		return lag == 0, err
	}); err != nil {
		e.log.Warn("attack: lag", "err", err)
	}
	end, err := e.kafka.EndOffsets(ctx, e.dlq)
	if err != nil {
		return row, err
	}
	stubs, largest := 0, 0
	if err := e.kafka.ReadRange(ctx, e.dlq, map[int]int64{0: 0}, end, func(m kafka.Message) {
		stubs++
		largest = max(largest, len(m.Value))
	}); err != nil {
		return row, err
	}
	peak, bound := agg.PeakRSS(), aggregatorRSSBound(idle)
	alive := agg.Alive()
	row.Pass = denied && lag == 0 && stubs == fetchBombs && largest <= 8<<10 && alive && peak <= bound
	row.Held = fmt.Sprintf("IP behind the records denied: %t; committed lag %d; DLQ records %d, largest %d bytes; "+
		"aggregator alive %t, peak RSS %s against its bound %s (idle %s + 2 × 2 groups × 1 partition × %s, docs/operations.md); "+
		"the same at 36c81e2 (kafka-go's Client.Fetch): %s",
		denied, lag, stubs, largest, alive, harness.MiB(peak), harness.MiB(bound), harness.MiB(idle), harness.MiB(fetchPathBound), fetchBombsBefore)
	return row, nil
}

// fetchBombsBefore is the same attack against the aggregator built from
// 36c81e2, before fetches had a budget (floodbench attack --only
// fetch-of-bombs --bin <that binary>, three runs).
const fetchBombsBefore = "peak RSS 1844 to 1859 MiB (three runs), the IP denied, lag 0"
