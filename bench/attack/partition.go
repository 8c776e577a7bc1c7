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

// bombs are the compressed records of the partition scenario: small on the
// wire, large once decompressed.
var bombs = []struct {
	name  string
	codec kafka.Compression
	size  int
}{
	{"gzip, 3 MiB", kafka.Gzip, 3 << 20},
	{"zstd, 64 MiB", kafka.Zstd, 64 << 20},
}

// compressedRecord: records that decompress to megabytes, then events of
// one IP over its limit in the same (only) partition. The partition must
// move past them: the IP denied, the DLQ holding stubs, no lag.
func compressedRecord(ctx context.Context, e *env) (Row, error) {
	row := Row{Tried: "a gzip record of 3 MiB and a zstd record of 64 MiB (a few KB on the wire each), then 3 events of one IP over 2/h, in one partition"}
	rules, err := e.writeRules(loginRules)
	if err != nil {
		return row, err
	}
	agg, err := e.startAggregator(ctx, rules)
	if err != nil {
		return row, err
	}
	l, err := e.startLimiter(ctx, rules, e.cfg.RedisAddr)
	if err != nil {
		return row, err
	}
	const ip = "203.0.113.20"
	key := []byte(event.Event{Kind: "ip", Subject: ip}.Key())
	for _, b := range bombs {
		w := &kafka.Writer{Addr: kafka.TCP(e.cfg.Brokers...), Topic: e.topic, Compression: b.codec,
			BatchBytes: int64(b.size) + 1<<20, RequiredAcks: kafka.RequireAll, Balancer: &kafka.Murmur2Balancer{Consistent: true}}
		err := w.WriteMessages(ctx, kafka.Message{Key: key, Value: bytes.Repeat([]byte{' '}, b.size)})
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return row, fmt.Errorf("write %s: %w", b.name, err)
		}
	}
	pub, err := producer.New(producer.Config{Brokers: e.cfg.Brokers, Topic: e.topic})
	if err != nil {
		return row, err
	}
	now := time.Now()
	evs := make([]event.Event, 3)
	for i := range evs {
		evs[i] = event.Event{ID: fmt.Sprintf("%s-z-%d", e.id, i), Action: "login_failed", Kind: "ip", Subject: ip, TS: now}
	}
	err = pub.Publish(ctx, evs...)
	if cerr := pub.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return row, fmt.Errorf("publish: %w", err)
	}
	denied := waitFor(ctx, "the IP behind the records denied", 2*time.Minute, func() (bool, error) {
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
	row.Pass = denied && lag == 0 && stubs == len(bombs) && largest <= 8<<10
	row.Held = fmt.Sprintf("IP behind the records denied: %t; committed lag %d; DLQ records %d, largest %d bytes; aggregator peak RSS %s, alive %t",
		denied, lag, stubs, largest, harness.MiB(agg.PeakRSS()), agg.Alive())
	return row, nil
}
