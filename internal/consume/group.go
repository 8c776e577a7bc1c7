package consume

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/semaphore"

	"github.com/floodgate-dev/floodgate/event"

	"github.com/floodgate-dev/floodgate/internal/jitter"
	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
)

// Headers set on dead-lettered messages, beside the original key, value and
// headers, so an operator can find and replay the source.
const (
	HeaderDLQReason    = "floodgate-dlq-reason"
	HeaderDLQDetail    = "floodgate-dlq-detail"
	HeaderDLQTopic     = "floodgate-dlq-topic"
	HeaderDLQPartition = "floodgate-dlq-partition"
	HeaderDLQOffset    = "floodgate-dlq-offset"
	HeaderDLQGroup     = "floodgate-dlq-group"
)

// ReasonFutureTimestamp is the dead-letter reason of events whose time is
// further ahead of the aggregator's clock than Config.MaxFutureSkew.
const ReasonFutureTimestamp = "future_timestamp"

// DefaultMaxFutureSkew is Config.MaxFutureSkew's default.
const DefaultMaxFutureSkew = time.Minute

// ReasonKeyMismatch is the dead-letter reason of events whose message key is
// not their "kind:subject": such an event may sit on a partition that does not
// own its subject.
const ReasonKeyMismatch = "key_mismatch"

// MessageWriter is where dead letters go; *kafka.Writer satisfies it.
type MessageWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

var _ MessageWriter = (*kafka.Writer)(nil)

// Config configures a Group. Zero values take the defaults named per field.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Security is how to reach them: TLS and SASL (zero: plaintext).
	Security kafkaconn.Security
	// Topic of access events. Required.
	Topic string
	// GroupID of the consumer group. Required; each sink needs its own group
	// so that one sink's outage never stalls the other.
	GroupID string
	// BatchMax caps the messages in one batch. Default 10000.
	BatchMax int
	// BatchWait, when positive, makes a worker keep filling a batch for
	// that long after its first message (floodgate's behaviour before
	// adaptive batching; benchmarks compare the two). Default 0: a batch is
	// what has been fetched by the time the previous one is applied, so an
	// idle partition applies an event at once and a busy one in large
	// batches.
	BatchWait time.Duration
	// FetchMaxBytes bounds one fetch response. Default 1 MiB.
	FetchMaxBytes int64
	// ReadAheadBytes bounds what a partition holds fetched and not yet
	// taken into a batch: the memory its records keep alive (the chunks
	// their keys, values and headers are cut from, and the records
	// themselves, about 150 bytes each). A response is decompressed
	// on arrival and may hold ten times its size on the wire, so counting
	// responses would not bound memory. It is also each fetch's budget
	// (FetcherConfig.MaxHeldBytes): a fetch whose records reach it stops
	// there, and the next one reads on. Default 16 MiB.
	ReadAheadBytes int64
	// FetchMaxWait is how long a fetch waits on an idle partition. Default
	// 500ms.
	FetchMaxWait time.Duration
	// OnLostOffsets is what a partition does when the log no longer holds
	// its next offset (retention deleted events nobody counted, or the
	// topic was recreated): LostOffsetsSkip (default) reports (ERROR log,
	// floodgate_aggregator_skipped_offsets_total) and goes on from what the
	// log holds; LostOffsetsStop reports and stops the partition.
	OnLostOffsets LostOffsetsPolicy
	// MaxFutureSkew is how far ahead of Now an event time may be; an event
	// ahead by less is counted at Now (floodgate_aggregator_clamped_total),
	// further ahead it is dead-lettered. Default 1m: the clock skew of a
	// producer host floodgate tolerates.
	MaxFutureSkew time.Duration
	// DeadLetter receives malformed messages with their reason. Nil means
	// malformed messages are counted and skipped: only one of the groups over
	// a topic should dead-letter, or the DLQ gets every bad message twice.
	DeadLetter MessageWriter
	// DeadLetterMaxWait is how long a batch's dead letters are retried
	// (the DLQ unavailable) before they are dropped, each with an ERROR
	// log and floodgate_aggregator_dead_letter_dropped_total; a dead
	// letter the DLQ refuses for good (too large, invalid) is dropped at
	// once. Default 1m.
	DeadLetterMaxWait time.Duration
	// RetryBackoff is the least pause after a failed Apply or dead-letter
	// write; the pauses double, jittered (so that partitions failing
	// together do not retry together), up to MaxRetryBackoff. Defaults
	// 200ms and 5s. A partition retries the same batch until it succeeds:
	// nothing is skipped.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// SessionTimeout of the group membership. Default 10s, so that a killed
	// member's partitions move quickly.
	SessionTimeout time.Duration
	// CommitInterval is how often the workers' progress is committed to
	// the group, one OffsetCommit for every partition of the member; the
	// last progress is committed when the generation ends. Default 1s.
	// Commits are advisory (the sink's offsets are the truth): they feed
	// lag monitors and the fallback of a sink that holds no offset.
	CommitInterval time.Duration
	// Now is the clock for the future-skew check. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the group's metrics. Nil: not registered.
	Registerer prometheus.Registerer
}

// LostOffsetsPolicy is Config.OnLostOffsets.
type LostOffsetsPolicy string

// The lost-offsets policies.
const (
	LostOffsetsSkip LostOffsetsPolicy = "skip"
	LostOffsetsStop LostOffsetsPolicy = "stop"
)

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("aggregator config: no brokers")
	case c.Topic == "":
		return errors.New("aggregator config: no topic")
	case c.GroupID == "":
		return errors.New("aggregator config: no group id")
	case c.BatchMax < 0:
		return fmt.Errorf("aggregator config: batch max %d is negative", c.BatchMax)
	case c.BatchWait < 0 || c.MaxFutureSkew < 0 || c.DeadLetterMaxWait < 0 || c.RetryBackoff < 0 || c.MaxRetryBackoff < 0 || c.FetchMaxWait < 0 || c.CommitInterval < 0:
		return errors.New("aggregator config: durations must not be negative")
	case c.FetchMaxBytes < 0 || c.ReadAheadBytes < 0:
		return fmt.Errorf("aggregator config: fetch max bytes %d, read-ahead bytes %d: must not be negative", c.FetchMaxBytes, c.ReadAheadBytes)
	case c.OnLostOffsets != "" && c.OnLostOffsets != LostOffsetsSkip && c.OnLostOffsets != LostOffsetsStop:
		return fmt.Errorf("aggregator config: on lost offsets %q: want skip or stop", c.OnLostOffsets)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.BatchMax == 0 {
		c.BatchMax = 10000
	}
	if c.ReadAheadBytes == 0 {
		c.ReadAheadBytes = 16 << 20
	}
	if c.OnLostOffsets == "" {
		c.OnLostOffsets = LostOffsetsSkip
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = time.Second
	}
	if c.MaxFutureSkew == 0 {
		c.MaxFutureSkew = DefaultMaxFutureSkew
	}
	if c.DeadLetterMaxWait == 0 {
		c.DeadLetterMaxWait = time.Minute
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 200 * time.Millisecond
	}
	if c.MaxRetryBackoff == 0 {
		c.MaxRetryBackoff = 5 * time.Second
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Group consumes a topic as a member of a consumer group and feeds one Sink.
type Group struct {
	cfg     Config
	client  *kafka.Client // fetches, straight to partition leaders
	sink    Sink
	log     *slog.Logger
	metrics *metrics
}

// NewGroup checks cfg and returns a Group ready to Run.
func NewGroup(cfg Config, sink Sink) (*Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, errors.New("aggregator config: nil sink")
	}
	cfg.setDefaults()
	m, err := newMetrics(cfg.Registerer, cfg.GroupID)
	if err != nil {
		return nil, err
	}
	return &Group{
		cfg: cfg,
		client: &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: 30 * time.Second,
			// Metadata (who leads which partition) is refreshed often, so a
			// fetch finds a new leader soon after a broker dies.
			Transport: cfg.Security.Transport(&kafka.Transport{MetadataTTL: 2 * time.Second, DialTimeout: 5 * time.Second})},
		sink:    sink,
		log:     cfg.Logger.With("group", cfg.GroupID, "topic", cfg.Topic),
		metrics: m,
	}, nil
}

// Run joins the group and processes assigned partitions until ctx ends. On
// cancellation each worker finishes the batch it holds (apply and commit)
// before Run returns, so a graceful stop loses and repeats nothing.
func (g *Group) Run(ctx context.Context) error {
	if err := g.checkTopic(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it began: nothing read, nothing to commit
		}
		return err
	}
	cg, err := g.join()
	if err != nil {
		return err
	}
	defer func() {
		if cerr := cg.Close(); cerr != nil {
			g.log.Warn("leave group", "err", cerr)
		}
		if t, ok := g.client.Transport.(*kafka.Transport); ok {
			t.CloseIdleConnections()
		}
	}()
	for {
		gen, err := cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, kafka.ErrGroupClosed) {
				return nil
			}
			g.log.Warn("next generation", "err", err)
			if !sleep(ctx, g.cfg.RetryBackoff) {
				return nil
			}
			continue
		}
		began := time.Now()
		g.runGeneration(ctx, gen)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(began) < g.cfg.RetryBackoff {
			// A generation that ended at once (the coordinator moving, a
			// topic deleted under us) must not turn into a join loop.
			if !sleep(ctx, g.cfg.RetryBackoff) {
				return nil
			}
		}
	}
}

// join makes the group's member of the Kafka consumer group.
func (g *Group) join() (*kafka.ConsumerGroup, error) {
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                     g.cfg.GroupID,
		Brokers:                g.cfg.Brokers,
		Dialer:                 g.cfg.Security.Dialer(nil),
		Topics:                 []string{g.cfg.Topic},
		SessionTimeout:         g.cfg.SessionTimeout,
		RebalanceTimeout:       g.cfg.SessionTimeout,
		HeartbeatInterval:      g.cfg.SessionTimeout / 5,
		JoinGroupBackoff:       time.Second,
		WatchPartitionChanges:  true,
		PartitionWatchInterval: 10 * time.Second,
		StartOffset:            kafka.FirstOffset,
		ErrorLogger:            kafka.LoggerFunc(func(msg string, args ...any) { g.log.Debug("kafka group: " + fmt.Sprintf(msg, args...)) }),
	})
	if err != nil {
		return nil, fmt.Errorf("join group %s: %w", g.cfg.GroupID, err)
	}
	return cg, nil
}

// runGeneration runs a worker per partition gen assigns until the
// generation ends (a rebalance) or ctx does (a shutdown); either way the
// workers finish their current batch, and their last batches are
// committed once, before it returns.
func (g *Group) runGeneration(ctx context.Context, gen *kafka.Generation) {
	parts := gen.Assignments[g.cfg.Topic]
	ids := make([]int, 0, len(parts))
	for _, p := range parts {
		ids = append(ids, p.ID)
	}
	g.log.Info("assigned", "generation", gen.ID, "partitions", ids)
	g.metrics.generations.Inc()
	// Any function given to gen.Start that returns ends the generation for
	// the whole group, so workers return only when told to stop.
	var wg sync.WaitGroup
	cm := newCommitter(gen, g.cfg.Topic, g.log)
	workersDone := make(chan struct{})
	var commits sync.WaitGroup
	commits.Add(1)
	// One of the generation's functions, so that the generation's
	// connection is still open for the commit after the workers' last
	// batches.
	gen.Start(func(context.Context) {
		defer commits.Done()
		cm.run(workersDone, g.cfg.CommitInterval)
	})
	for _, p := range parts {
		wg.Add(1)
		gen.Start(func(genCtx context.Context) {
			defer wg.Done()
			w := &worker{g: g, gen: gen, cm: cm, partition: p.ID, committed: p.Offset}
			w.run(ctx, genCtx)
		})
	}
	if len(parts) == 0 {
		// More members than partitions: stay an idle member until the
		// next rebalance rather than rejoining at once, which would force
		// a rebalance on every member.
		wg.Add(1)
		gen.Start(func(genCtx context.Context) {
			defer wg.Done()
			select {
			case <-genCtx.Done():
			case <-ctx.Done():
			}
		})
	}
	// When ctx ends the workers return after their last batch; Run's
	// deferred Close then leaves the group.
	wg.Wait()
	close(workersDone) // the workers' last batches, committed once
	commits.Wait()
}

// checkTopic fails fast with a clear error when the topic does not exist:
// the broker does not auto-create it, and a group over a missing topic would
// otherwise rejoin forever with nothing assigned.
func (g *Group) checkTopic(ctx context.Context) error {
	c := g.cfg.Security.Client(g.cfg.Brokers, 10*time.Second, nil)
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{g.cfg.Topic}})
	if err != nil {
		return fmt.Errorf("group %s: read metadata of topic %s: %w", g.cfg.GroupID, g.cfg.Topic, err)
	}
	for _, t := range md.Topics {
		if t.Name == g.cfg.Topic && t.Error == nil && len(t.Partitions) > 0 {
			return nil
		}
	}
	return fmt.Errorf("group %s: topic %s does not exist (create it with `floodgate topics`)", g.cfg.GroupID, g.cfg.Topic)
}

// worker owns one partition for the life of one generation.
type worker struct {
	g         *Group
	gen       *kafka.Generation
	partition int
	cm        *committer
	committed int64 // the group's committed offset at assignment
	// next is the offset the partition stands at: where it resumed, then
	// each applied batch's Next. Negative until known (resuming from the
	// start of the log).
	next  int64
	carry *fetched // fetched beyond the last batch's BatchMax
	// ahead bounds the records fetched and not yet taken into a batch
	// (Config.ReadAheadBytes): the fetch loop acquires a response's size
	// before it hands the response over, take releases it.
	ahead      *semaphore.Weighted
	aheadBytes prometheus.Gauge   // floodgate_aggregator_read_ahead_bytes
	aheadWaits prometheus.Counter // floodgate_aggregator_read_ahead_waits_total
	held       *fetched           // an offset reset met while filling a batch
	// recounted: offsets below it are read again by a recount (Recounter);
	// their malformed messages were dead-lettered when first read.
	recounted int64
	log       *slog.Logger
}

// fetched is what the fetch loop hands the apply loop: records, or a
// stored offset to move back (the topic was recreated; the fetch loop
// waits for done before it fetches on).
type fetched struct {
	// parts are the records in offset order: one fetch's, or the several
	// fetches take gathered (kept apart: joining them copied every
	// record's kafka.Message again).
	parts [][]kafka.Message
	// bufs[i] is the memory parts[i] was read into, nil where a batch
	// holds only the head of a response (the batch holding its tail hands
	// it back).
	bufs  []*buffer
	n     int   // records in parts
	size  int64 // what parts hold of the read-ahead bound
	end   int64 // the offset after everything read (records and transaction markers)
	hw    int64 // high-water mark when fetched
	reset *LostOffsetsError
	done  chan<- bool
	// unreadable are offsets before end the fetcher moved past unread.
	unreadable *UnreadableError
	// reread is the sink's reason to read the partition again (Rereader).
	reread string
}

func (w *worker) run(ctx, genCtx context.Context) {
	g := w.g
	w.log = g.log.With("partition", w.partition)
	// stop fires when either the process is shutting down or the partition
	// was revoked. Batches in flight are applied with a context that outlives
	// stop: exactly-once is kept by the sink's offset check, not by abandoning
	// work half-way, and shutdown promises to finish in-flight work.
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-genCtx.Done():
			cancel()
		case <-stop.Done():
		}
	}()

	next, ok := w.resume(stop)
	if !ok {
		return
	}
	w.log.Info("partition started", "offset", next)

	var wg sync.WaitGroup
	// A sink's per-partition work (the live relay) runs beside the batches
	// and ends only once the last batch is applied.
	rctx, rcancel := context.WithCancel(context.WithoutCancel(ctx))
	if pr, ok := g.sink.(PartitionRunner); ok {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr.RunPartition(rctx, g.cfg.Topic, w.partition)
		}()
	}
	for stop.Err() == nil {
		rewind := w.consume(ctx, stop, next)
		if rewind == nil {
			break
		}
		if rewind.Recount {
			rc, ok := g.sink.(Recounter)
			if !ok {
				w.log.Error("partition stopped: the sink says its store lost the partition but cannot count it again", "err", rewind)
				break
			}
			if next, ok = w.recount(stop, rc, rewind.First, rewind.Reason); !ok {
				break
			}
			continue
		}
		// The sink lost batches it had acknowledged: what it holds is a
		// consistent past (offset and effects together), so reading again
		// from its offset applies exactly what was lost.
		if rewind.Reason != "" {
			// Not a loss: the sink's memory is rebuilt from its checkpoint.
			g.metrics.rebuilds.WithLabelValues(strconv.Itoa(w.partition)).Inc()
			w.log.Warn("the sink reads the partition again from its checkpoint", "sink_next", rewind.Next, "batch_first", rewind.First, "reason", rewind.Reason)
			next = rewind.Next
			continue
		}
		g.metrics.rewinds.WithLabelValues(strconv.Itoa(w.partition)).Inc()
		w.log.Error("the sink lost batches it had acknowledged (a failover of its store?); reading the partition again from its offset",
			"sink_next", rewind.Next, "batch_first", rewind.First, "lost_offsets", rewind.First-rewind.Next)
		next = rewind.Next
	}
	cancel()
	rcancel()
	wg.Wait()
}

// consume reads the partition from offset next and applies it until stop
// fires, or until the sink says it lost batches it had acknowledged: then
// it returns the sink's *RewindError, for the caller to read again from
// there.
func (w *worker) consume(ctx, stop context.Context, next int64) *RewindError {
	g := w.g
	f, err := NewFetcher(FetcherConfig{Client: g.client, Topic: g.cfg.Topic, Partition: w.partition, Offset: next,
		MaxBytes: g.cfg.FetchMaxBytes, MaxHeldBytes: g.cfg.ReadAheadBytes, MaxWait: g.cfg.FetchMaxWait})
	if err != nil {
		w.log.Error("partition not started", "err", err)
		return nil
	}
	w.next, w.carry, w.held = next, nil, nil
	w.ahead = semaphore.NewWeighted(g.cfg.ReadAheadBytes)
	w.aheadBytes = g.metrics.readAhead.WithLabelValues(strconv.Itoa(w.partition))
	w.aheadWaits = g.metrics.aheadWaits.WithLabelValues(strconv.Itoa(w.partition))
	w.aheadBytes.Set(0) // what a previous run left queued is gone with it
	// The fetch loop stops with the apply loop: what it fetched past a
	// rewind is read again.
	fstop, fcancel := context.WithCancel(stop)
	defer fcancel()
	// Room for a few responses: the next batch is fetched while this one is
	// applied, and batches grow only while a backlog waits here. What the
	// responses hold is bounded by w.ahead, not by their number.
	ch := make(chan fetched, 8)
	fetching := make(chan struct{})
	go func() {
		defer close(fetching)
		w.fetchLoop(fstop, f, ch)
	}()
	var reread <-chan string
	if rr, ok := g.sink.(Rereader); ok {
		reread = rr.Rereads(w.partition)
	}
	rewind := w.applyLoop(ctx, stop, ch, reread)
	fcancel()
	<-fetching
	// What is still queued goes with the channel: a revoked partition
	// must not go on showing it.
	w.aheadBytes.Set(0)
	return rewind
}

// applyLoop applies what the fetch loop hands over until stop fires,
// finishing the batch in hand. It returns the sink's *RewindError when the
// sink refused a batch because it lost earlier ones, nil otherwise.
func (w *worker) applyLoop(ctx, stop context.Context, ch <-chan fetched, reread <-chan string) *RewindError {
	w.g.metrics.partitionStarted(w.partition)
	lag := w.g.metrics.lag.WithLabelValues(strconv.Itoa(w.partition))
	for {
		item, ok := w.take(stop, ch, reread)
		if !ok {
			return nil
		}
		// Past this point the batch is applied even if stop fires.
		work := context.WithoutCancel(ctx)
		if item.reread != "" {
			next, ok, err := w.g.sink.Resume(work, w.g.cfg.Topic, w.partition)
			if _, rc := w.g.sink.(Recounter); rc && err == nil && !ok && w.next >= 0 {
				// The partition was applied here, and its store holds no
				// offset now: lost, and an idle partition's next batch may
				// be long in coming.
				return &RewindError{Topic: w.g.cfg.Topic, Partition: w.partition, First: w.next, Recount: true,
					Reason: "the sink's offset is gone as it reads the partition again: " + item.reread}
			}
			if err != nil || !ok {
				// The next batch finds the sink's memory gone and rewinds.
				w.log.Warn("the sink asked to read the partition again, but its offset could not be read", "reason", item.reread, "err", err)
				continue
			}
			return &RewindError{Topic: w.g.cfg.Topic, Partition: w.partition, Next: next, First: w.next, Reason: item.reread}
		}
		if item.reset != nil {
			ok := w.resetOffset(stop, work, item.reset)
			item.done <- ok
			if !ok {
				return nil
			}
			continue
		}
		if item.n == 0 && w.next < 0 && item.unreadable == nil {
			// Transaction markers before any record of a partition never
			// applied: nothing to store yet.
			w.next = item.end
			continue
		}
		b, dead := w.batch(item)
		lag.Set(float64(max(item.hw-b.Next(), 0)))
		if !w.deadLetter(stop, work, dead) {
			return nil
		}
		if len(dead) == 0 {
			// The batch's events hold copies; a dead letter may still be
			// held by the DLQ writer after a timeout.
			for _, buf := range item.bufs {
				if buf != nil {
					buf.recycle()
				}
			}
		}
		rewind, ok := w.apply(stop, work, b)
		if rewind != nil || !ok {
			return rewind
		}
		w.next = b.Next()
		w.commit(b)
		recycleRecords(b.Records)
		if stop.Err() != nil {
			return nil
		}
	}
}

// take returns the next batch's messages: everything fetched by now, up to
// BatchMax (the rest is carried to the next batch), gathering no more
// fetches once it holds ReadAheadBytes. It waits for more only when
// nothing is in hand, or for BatchWait when that is set.
func (w *worker) take(stop context.Context, ch <-chan fetched, reread <-chan string) (fetched, bool) {
	if w.held != nil {
		out := *w.held
		w.held = nil
		return out, true
	}
	var out fetched
	if w.carry != nil {
		out, w.carry = *w.carry, nil
	} else {
		select {
		case <-stop.Done():
			return out, false
		case why := <-reread:
			return fetched{reread: why}, true
		case out = <-ch:
		}
		w.release(out.size)
		if out.reset != nil || out.unreadable != nil {
			return out, true
		}
	}
	var fill <-chan time.Time
	if w.g.cfg.BatchWait > 0 {
		t := time.NewTimer(w.g.cfg.BatchWait)
		defer t.Stop()
		fill = t.C
	}
	// What the batch holds, as the read-ahead bound counted it: bounded by
	// bytes too, not only by BatchMax, so that a partition's memory is
	// (the fetch loop refills the room the batch gave back meanwhile).
	hand := out.size
	for out.n < w.g.cfg.BatchMax && hand < w.g.cfg.ReadAheadBytes {
		var more fetched
		if fill == nil {
			select {
			case more = <-ch:
			default:
				return w.cut(out), true
			}
		} else {
			select {
			case more = <-ch:
			case <-fill:
				return w.cut(out), true
			case <-stop.Done():
				return w.cut(out), true
			}
		}
		w.release(more.size)
		if more.reset != nil || more.unreadable != nil {
			w.held = &more
			break
		}
		hand += more.size
		out.parts = append(out.parts, more.parts...)
		out.bufs = append(out.bufs, more.bufs...)
		out.n += more.n
		out.end, out.hw = more.end, more.hw
	}
	return w.cut(out), true
}

// cut keeps BatchMax messages and carries the rest to the next batch.
func (w *worker) cut(out fetched) fetched {
	n := w.g.cfg.BatchMax
	if out.n <= n {
		return out
	}
	rest := out
	kept, end := 0, out.end
	for i, p := range out.parts {
		if kept+len(p) <= n {
			kept += len(p)
			if len(p) > 0 {
				end = p[len(p)-1].Offset + 1
			}
			continue
		}
		k := n - kept
		if k > 0 {
			end = p[k-1].Offset + 1
		}
		// The rest shares the part's array; the batch's piece is capped at
		// k so that no append to it can reach the rest, and the rest hands
		// the array back.
		rest.parts = append([][]kafka.Message{p[k:]}, out.parts[i+1:]...)
		out.parts = append(out.parts[:i:i], p[:k:k])
		rest.bufs = append([]*buffer(nil), out.bufs[i:]...)
		out.bufs = append(out.bufs[:i:i], nil)
		break
	}
	rest.n = out.n - n
	w.carry = &rest
	out.n, out.end = n, end
	return out
}

// fetchLoop fetches from the partition's leader and hands the records over
// until stop fires. Transient errors (a leader moving, a broker restarting)
// are retried; offsets the log lost are handled by the policy.
func (w *worker) fetchLoop(stop context.Context, f *Fetcher, ch chan<- fetched) {
	g := w.g
	wait := jitter.New(g.cfg.RetryBackoff, g.cfg.MaxRetryBackoff)
	beyond := 0
	last := f.Next() // what was handed over last: only transaction markers may follow
	for stop.Err() == nil {
		markers, cuts := f.Markers, f.Cuts
		buf, err := f.fetch(stop)
		g.metrics.control.Add(float64(f.Markers - markers))
		g.metrics.cuts.Add(float64(f.Cuts - cuts))
		if stop.Err() != nil {
			return
		}
		var lost *LostOffsetsError
		var unreadable *UnreadableError
		switch {
		case errors.As(err, &unreadable):
			// Handed over like records: the next batch covers the skipped
			// offsets and reports them.
			last = f.Next()
			select {
			case ch <- fetched{end: f.Next(), hw: f.HighWatermark, unreadable: unreadable}:
			case <-stop.Done():
				return
			}
			continue
		case errors.As(err, &lost) && lost.Beyond && beyond < 2:
			// A log end can lag for a moment while leadership moves: make
			// sure before acting on it.
			beyond++
			sleep(stop, time.Second)
			continue
		case errors.As(err, &lost):
			beyond = 0
			if !w.lostOffsets(stop, f, lost, ch) {
				return
			}
			continue
		case err != nil:
			g.metrics.errors.WithLabelValues("fetch").Inc()
			backoff := wait.Next()
			w.log.Warn("fetch failed; retrying", "err", err, "backoff", backoff)
			if !sleep(stop, backoff) {
				return
			}
			continue
		}
		beyond = 0
		wait.Reset()
		msgs := buf.msgs
		if len(msgs) == 0 && f.Next() <= last {
			buf.recycle()
			continue
		}
		last = f.Next()
		// Wait for room before handing the records over: a backlog of
		// large, well-compressed responses would otherwise pile up here.
		size := min(f.held, g.cfg.ReadAheadBytes)
		if !w.ahead.TryAcquire(size) {
			w.aheadWaits.Inc()
			if err := w.ahead.Acquire(stop, size); err != nil {
				return
			}
		}
		w.aheadBytes.Add(float64(size))
		select {
		case ch <- fetched{parts: [][]kafka.Message{msgs}, bufs: []*buffer{buf}, n: len(msgs), size: size, end: f.Next(), hw: f.HighWatermark}:
		case <-stop.Done():
			return
		}
	}
}

// release gives back what a response held of the read-ahead bound.
func (w *worker) release(size int64) {
	if size > 0 {
		w.ahead.Release(size)
		w.aheadBytes.Sub(float64(size))
	}
}

// lostOffsets applies the lost-offsets policy; false stops the fetch loop.
func (w *worker) lostOffsets(stop context.Context, f *Fetcher, lost *LostOffsetsError, ch chan<- fetched) bool {
	g := w.g
	part := strconv.Itoa(w.partition)
	if g.cfg.OnLostOffsets == LostOffsetsStop {
		g.metrics.stopped.WithLabelValues(part).Set(1)
		w.log.Error("partition stopped: offsets lost; restart with --on-lost-offsets=skip to go on, or reset the stored offset",
			"topic", lost.Topic, "from", lost.From, "to", lost.To, "beyond_log_end", lost.Beyond, "lost", lost.Lost(), "err", lost)
		<-stop.Done()
		g.metrics.stopped.WithLabelValues(part).Set(0)
		return false
	}
	if !lost.Beyond {
		// The next batch starts at w.next and covers the lost offsets: the
		// sink stores the skip with it.
		g.metrics.skipped.WithLabelValues(part).Add(float64(lost.Lost()))
		w.log.Error("offsets lost: deleted by retention before this group read them; their events are not counted",
			"topic", lost.Topic, "from", lost.From, "to", lost.To-1, "lost", lost.Lost())
		f.SetOffset(lost.To)
		return true
	}
	done := make(chan bool, 1)
	select {
	case ch <- fetched{reset: lost, done: done}:
	case <-stop.Done():
		return false
	}
	select {
	case ok := <-done:
		if ok {
			f.SetOffset(lost.To)
		}
		return ok
	case <-stop.Done():
		return false
	}
}

// resetOffset moves the sink's stored offset back to the recreated log's
// start; sinks that cannot stop the partition instead.
func (w *worker) resetOffset(stop, work context.Context, lost *LostOffsetsError) bool {
	g := w.g
	part := strconv.Itoa(w.partition)
	r, ok := g.sink.(OffsetResetter)
	if !ok {
		g.metrics.stopped.WithLabelValues(part).Set(1)
		w.log.Error("partition stopped: the stored offset is beyond the log's end and the sink cannot move it back",
			"topic", lost.Topic, "stored", lost.From, "log_start", lost.To)
		<-stop.Done()
		g.metrics.stopped.WithLabelValues(part).Set(0)
		return false
	}
	w.log.Error("stored offset beyond the log's end (topic deleted and recreated?): what the old log held past it is lost; resuming at the new log's start",
		"topic", lost.Topic, "stored", lost.From, "log_start", lost.To)
	if !w.retry(stop, "reset-offset", func() error {
		ctx, cancel := context.WithTimeout(work, 30*time.Second)
		defer cancel()
		return r.ResetOffset(ctx, g.cfg.Topic, w.partition, lost.From, lost.To)
	}, func() {}) {
		return false
	}
	g.metrics.resets.WithLabelValues(part).Inc()
	w.next = lost.To
	return true
}

// resume finds where the partition starts: the sink's own offset when it has
// one, else the group's committed offset, else the start of the log.
func (w *worker) resume(stop context.Context) (int64, bool) {
	wait := jitter.New(w.g.cfg.RetryBackoff, w.g.cfg.MaxRetryBackoff)
	for {
		next, ok, err := w.g.sink.Resume(stop, w.g.cfg.Topic, w.partition)
		if err == nil {
			switch {
			case ok:
				return next, true
			case w.committed >= 0:
				// The group committed progress its sink never stored: the
				// sink's store lost its data (Redis restarted without
				// persistence, flushed) or was replaced.
				w.g.metrics.sinkOffsetMissing.WithLabelValues(strconv.Itoa(w.partition)).Inc()
				if rc, ok := w.g.sink.(Recounter); ok {
					return w.recount(stop, rc, w.committed, "the sink holds no offset for a partition the group has committed progress on")
				}
				// What the sink held is gone; only what follows is counted.
				w.log.Error("the sink holds no offset for a partition the group has committed progress on: its store lost its data; resuming at the committed offset",
					"committed", w.committed)
				return w.committed, true
			default:
				return kafka.FirstOffset, true
			}
		}
		w.log.Warn("resume offset", "err", err)
		if !sleep(stop, wait.Next()) {
			return 0, false
		}
	}
}

// recount finds where a Recounter whose store lost the partition counts it
// again: the first offset written RecountSince ago or later, at most at
// (where the partition stood). It tells the sink, with the partition's
// end: records before it were counted in the store lost.
func (w *worker) recount(stop context.Context, rc Recounter, at int64, why string) (int64, bool) {
	since := w.g.cfg.Now().Add(-rc.RecountSince())
	var first, from, end int64
	if !w.retry(stop, "recount", func() error {
		ctx, cancel := context.WithTimeout(stop, 30*time.Second)
		defer cancel()
		var err error
		first, from, end, err = w.recountRange(ctx, since)
		return err
	}, func() {}) {
		return 0, false
	}
	from = max(min(from, at), first)
	to := max(end, at)
	if !w.retry(stop, "recount", func() error {
		ctx, cancel := context.WithTimeout(stop, 30*time.Second)
		defer cancel()
		return rc.Recount(ctx, w.g.cfg.Topic, w.partition, from, to)
	}, func() {}) {
		return 0, false
	}
	w.recounted = max(w.recounted, at)
	part := strconv.Itoa(w.partition)
	w.g.metrics.recounts.WithLabelValues(part).Inc()
	w.g.metrics.recounted.WithLabelValues(part).Add(float64(max(at-from, 0)))
	w.log.Error("the sink's store lost the partition: counting it again from the log; its decisions lag until the recount reaches where it stood",
		"reason", why, "from", from, "stood_at", at, "counted_before", to, "since", since.UTC().Format(time.RFC3339))
	return from, true
}

// recountRange returns where the partition's log starts, its first
// offset written at or after since (its end when there is none) and its
// end.
func (w *worker) recountRange(ctx context.Context, since time.Time) (first, from, end int64, err error) {
	topic, p := w.g.cfg.Topic, w.partition
	resp, err := w.g.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics:         map[string][]kafka.OffsetRequest{topic: {kafka.TimeOffsetOf(p, since), kafka.LastOffsetOf(p), kafka.FirstOffsetOf(p)}},
		IsolationLevel: kafka.ReadCommitted})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("list offsets since %s: %w", since.Format(time.RFC3339), err)
	}
	for _, po := range resp.Topics[topic] {
		if po.Partition != p {
			continue
		}
		if po.Error != nil {
			return 0, 0, 0, fmt.Errorf("list offsets since %s: %w", since.Format(time.RFC3339), po.Error)
		}
		from = po.LastOffset
		for off := range po.Offsets {
			if off >= 0 && off < from {
				from = off
			}
		}
		return po.FirstOffset, from, po.LastOffset, nil
	}
	return 0, 0, 0, fmt.Errorf("list offsets since %s: no answer for the partition", since.Format(time.RFC3339))
}

// batch decodes what was fetched into a Batch up to its end, and the dead
// letters of the messages that failed validation (which have no Record but
// whose offsets the batch covers).
func (w *worker) batch(item fetched) (Batch, []kafka.Message) {
	b := Batch{
		Topic:     w.g.cfg.Topic,
		Partition: w.partition,
		First:     item.end,
		Last:      item.end - 1,
		Records:   newRecords(item.n),
	}
	for _, p := range item.parts {
		if len(p) > 0 {
			b.First = p[0].Offset
			break
		}
	}
	if w.next >= 0 && w.next < b.First {
		// Offsets the log holds no message for (transaction markers,
		// compaction, and offsets the lost-offsets policy skipped, reported
		// there) belong to this batch: the sinks then see contiguous
		// batches and never mistake a hole in the log for a missing batch.
		b.First = w.next
	}
	var dead []kafka.Message
	if u := item.unreadable; u != nil {
		if w.next < 0 {
			b.First = u.From
		}
		if u.To > w.recounted { // else reported when first read; a recount reads it again
			part := strconv.Itoa(w.partition)
			w.g.metrics.unreadable.WithLabelValues(part).Add(float64(u.To - u.From))
			w.log.Error("offsets skipped: their record batch decompresses past the bound, or a record of theirs holds too many headers; their events are not counted",
				"from", u.From, "to", u.To-1, "bound_bytes", MaxBatchDecompressed, "bound_headers", MaxRecordHeaders, "err", u.Err)
			dead = append(dead, w.unreadableStub(u))
		}
	}
	now := w.g.cfg.Now()
	for _, msgs := range item.parts {
		for i := range msgs {
			m := &msgs[i]
			ev, clamped, derr := accept(m, now, w.g.cfg.MaxFutureSkew)
			if clamped {
				w.g.metrics.clamped.Inc()
			}
			if derr != nil {
				if m.Offset < w.recounted {
					continue // dead-lettered when first read: a recount reads it again
				}
				w.g.metrics.invalid.WithLabelValues(derr.Reason).Inc()
				dead = append(dead, w.deadLetterOf(m, derr))
				continue
			}
			b.Records = append(b.Records, Record{Offset: m.Offset, Event: ev, Counted: counted(m.Headers), Take: taken(m.Headers)})
		}
	}
	w.g.metrics.in.Add(float64(item.n))
	w.g.metrics.batchSize.Observe(float64(item.n))
	return b, dead
}

// Accept decodes and checks one message as every floodgate consumer does
// (the aggregator's groups, rebuild and backtest): a valid event, keyed by
// its "kind:subject", not further ahead of now than maxSkew. An event ahead
// of now by at most maxSkew (a producer whose clock runs fast) is counted
// at now: a consumer that reads it later (the history group, a rebuild)
// finds it no longer ahead and counts it too, so every path counts it. A
// refused message gets a reason for the dead-letter topic.
func Accept(m *kafka.Message, now time.Time, maxSkew time.Duration) (event.Event, *event.Error) {
	ev, _, err := accept(m, now, maxSkew)
	return ev, err
}

// accept is Accept, and whether the event's time was moved back to now.
func accept(m *kafka.Message, now time.Time, maxSkew time.Duration) (event.Event, bool, *event.Error) {
	ev, err := event.Decode(m.Value)
	if err != nil {
		var e *event.Error
		if errors.As(err, &e) {
			return ev, false, e
		}
		return ev, false, &event.Error{Reason: "invalid", Detail: err.Error()}
	}
	if err := event.CheckKey(m.Key, ev); err != nil {
		return ev, false, &event.Error{Reason: ReasonKeyMismatch, Field: "key", Detail: err.Error()}
	}
	if ev.TS.After(now.Add(maxSkew)) {
		return ev, false, &event.Error{Reason: ReasonFutureTimestamp, Field: "ts",
			Detail: fmt.Sprintf("event time %s is %s ahead of the aggregator clock (max %s)",
				ev.TS.Format(time.RFC3339Nano), ev.TS.Sub(now).Round(time.Millisecond), maxSkew)}
	}
	if ev.TS.After(now) {
		ev.TS = now
		return ev, true, nil
	}
	return ev, false, nil
}

// Bounds of what the dead-letter topic receives of one message. A message
// up to dlqCopyMax (key, value and headers) is copied whole, so it can be
// replayed; a larger one (only a message the contract refuses can be
// larger: events are at most event.MaxSize) becomes a stub: its first
// dlqStubBytes of key and value, the value's size and SHA-256, the reason
// and the source coordinates. A copy of a message past the DLQ topic's
// max.message.bytes would be refused on every retry.
const (
	dlqCopyMax   = 16 << 10
	dlqStubBytes = 1 << 10
)

// Headers of a stub: the original value's size and SHA-256 (hex), and the
// end of a range of skipped offsets (HeaderDLQOffset is its start).
const (
	HeaderDLQSize      = "floodgate-dlq-size"
	HeaderDLQSHA256    = "floodgate-dlq-sha256"
	HeaderDLQTruncated = "floodgate-dlq-truncated"
	HeaderDLQOffsetEnd = "floodgate-dlq-offset-end"
)

// ReasonUnreadable is the dead-letter reason of offsets skipped unread: their
// record batch decompresses to more than MaxBatchDecompressed, or a record
// holds more than MaxRecordHeaders headers.
const ReasonUnreadable = "unreadable_batch"

// deadLetterOf is the DLQ message for m: the original key, value and headers
// (or a stub of them, past dlqCopyMax) plus the reason and the source
// coordinates.
func (w *worker) deadLetterOf(m *kafka.Message, derr *event.Error) kafka.Message {
	size := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		size += len(h.Key) + len(h.Value)
	}
	key, value := m.Key, m.Value
	hs := append([]kafka.Header(nil), m.Headers...)
	if size > dlqCopyMax {
		sum := sha256.Sum256(m.Value)
		key, value, hs = m.Key[:min(len(m.Key), dlqStubBytes)], m.Value[:min(len(m.Value), dlqStubBytes)], nil
		hs = append(hs,
			kafka.Header{Key: HeaderDLQTruncated, Value: []byte("1")},
			kafka.Header{Key: HeaderDLQSize, Value: []byte(strconv.Itoa(len(m.Value)))},
			kafka.Header{Key: HeaderDLQSHA256, Value: []byte(hex.EncodeToString(sum[:]))})
	}
	detail := derr.Error()
	detail = detail[:min(len(detail), dlqStubBytes)]
	return kafka.Message{
		Key:   key,
		Value: value,
		Headers: append(hs,
			kafka.Header{Key: HeaderDLQReason, Value: []byte(derr.Reason)},
			kafka.Header{Key: HeaderDLQDetail, Value: []byte(detail)},
			kafka.Header{Key: HeaderDLQTopic, Value: []byte(m.Topic)},
			kafka.Header{Key: HeaderDLQPartition, Value: []byte(strconv.Itoa(m.Partition))},
			kafka.Header{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(m.Offset, 10))},
			kafka.Header{Key: HeaderDLQGroup, Value: []byte(w.g.cfg.GroupID)},
		),
	}
}

// unreadableStub is the DLQ record of offsets skipped unread: nothing of
// them is known but where they are.
func (w *worker) unreadableStub(u *UnreadableError) kafka.Message {
	detail := u.Error()
	return kafka.Message{Headers: []kafka.Header{
		{Key: HeaderDLQReason, Value: []byte(ReasonUnreadable)},
		{Key: HeaderDLQDetail, Value: []byte(detail[:min(len(detail), dlqStubBytes)])},
		{Key: HeaderDLQTopic, Value: []byte(u.Topic)},
		{Key: HeaderDLQPartition, Value: []byte(strconv.Itoa(u.Partition))},
		{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(u.From, 10))},
		{Key: HeaderDLQOffsetEnd, Value: []byte(strconv.FormatInt(u.To-1, 10))},
		{Key: HeaderDLQGroup, Value: []byte(w.g.cfg.GroupID)},
	}}
}

// deadLetter writes the batch's malformed messages to the DLQ before the
// batch's offsets are applied, so a crash in between re-sends them (the DLQ is
// at-least-once) rather than losing them. Without a DeadLetter writer they are
// only counted. A message the DLQ refuses for good (too large, invalid) is
// dropped at once, and messages still failing after DeadLetterMaxWait are
// dropped too: a DLQ must not stop the partition it serves. Each drop is an
// ERROR log with the partition and offset and counts in
// floodgate_aggregator_dead_letter_dropped_total. It reports false only if
// stop fired while the DLQ failed.
func (w *worker) deadLetter(stop, work context.Context, dead []kafka.Message) bool {
	if len(dead) == 0 || w.g.cfg.DeadLetter == nil {
		return true
	}
	w.log.Warn("dead-lettering malformed events", "count", len(dead))
	pending := dead
	deadline := time.Now().Add(w.g.cfg.DeadLetterMaxWait)
	wait := jitter.New(w.g.cfg.RetryBackoff, w.g.cfg.MaxRetryBackoff)
	for {
		ctx, cancel := context.WithTimeout(work, 10*time.Second)
		err := w.g.cfg.DeadLetter.WriteMessages(ctx, pending...)
		cancel()
		failed := w.dlqFailed(pending, err)
		w.g.metrics.deadLettered.Add(float64(len(pending) - len(failed)))
		if len(failed) == 0 {
			return true
		}
		w.g.metrics.errors.WithLabelValues("dead-letter").Inc()
		if time.Now().After(deadline) {
			w.dropDeadLetters(failed, "retries_exhausted", err)
			return true
		}
		if stop.Err() != nil {
			w.log.Warn("dead-letter failed while stopping; the next owner redoes it", "err", err)
			return false
		}
		backoff := wait.Next()
		w.log.Warn("dead-letter failed; retrying", "err", err, "backoff", backoff, "messages", len(failed))
		if !sleep(stop, backoff) {
			return false
		}
		pending = failed
	}
}

// dlqFailed returns the messages of msgs to write again after err: it drops
// (with an ERROR log) those refused for good.
func (w *worker) dlqFailed(msgs []kafka.Message, err error) []kafka.Message {
	if err == nil {
		return nil
	}
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		// The writer checked sizes before sending: one message is too
		// large, the others were not sent.
		w.dropDeadLetters([]kafka.Message{tooLarge.Message}, "permanent", err)
		return tooLarge.Remaining
	}
	var perMsg kafka.WriteErrors
	if errors.As(err, &perMsg) && len(perMsg) == len(msgs) {
		var again []kafka.Message
		for i, e := range perMsg {
			switch {
			case e == nil:
			case permanentWriteError(e):
				w.dropDeadLetters(msgs[i:i+1], "permanent", e)
			default:
				again = append(again, msgs[i])
			}
		}
		return again
	}
	if permanentWriteError(err) {
		w.dropDeadLetters(msgs, "permanent", err)
		return nil
	}
	return msgs
}

// permanentWriteError tells whether the broker will refuse a write of the
// same message again whatever the wait.
func permanentWriteError(err error) bool {
	var ke kafka.Error
	if !errors.As(err, &ke) {
		return false
	}
	switch ke {
	case kafka.MessageSizeTooLarge, kafka.RecordListTooLarge, kafka.InvalidMessage, kafka.InvalidRecord,
		kafka.InvalidTimestamp, kafka.UnsupportedCompressionType:
		return true
	}
	return false
}

// dropDeadLetters reports dead letters that will not reach the DLQ.
func (w *worker) dropDeadLetters(msgs []kafka.Message, why string, err error) {
	w.g.metrics.dlqDropped.WithLabelValues(strconv.Itoa(w.partition), why).Add(float64(len(msgs)))
	for _, m := range msgs {
		w.log.Error("dead letter dropped: the DLQ refused it; the source offset stays skipped",
			"offset", dlqHeader(m, HeaderDLQOffset), "reason", dlqHeader(m, HeaderDLQReason), "why", why, "err", err)
	}
}

func dlqHeader(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// apply applies b, retrying until it succeeds or stop fires. A sink that
// refuses b because it lost earlier batches is not retried: its
// *RewindError is returned.
func (w *worker) apply(stop, work context.Context, b Batch) (*RewindError, bool) {
	var rewind *RewindError
	ok := w.retry(stop, "apply", func() error {
		start := time.Now()
		ctx, cancel := context.WithTimeout(work, 30*time.Second)
		defer cancel()
		err := w.g.sink.Apply(ctx, b)
		w.g.metrics.applySeconds.Observe(time.Since(start).Seconds())
		if errors.As(err, &rewind) {
			return nil // done with this batch: the partition is read again
		}
		return err
	}, func() {
		if rewind == nil {
			w.g.metrics.applied.Add(float64(len(b.Records)))
		}
	})
	return rewind, ok
}

// retry runs op until it succeeds. Once stop fires it makes one last attempt
// and gives up, leaving the batch to the next owner (its offsets were not
// applied, so nothing is lost).
func (w *worker) retry(stop context.Context, what string, op func() error, done func()) bool {
	wait := jitter.New(w.g.cfg.RetryBackoff, w.g.cfg.MaxRetryBackoff)
	for {
		err := op()
		if err == nil {
			done()
			return true
		}
		w.g.metrics.errors.WithLabelValues(what).Inc()
		if stop.Err() != nil {
			w.log.Warn(what+" failed while stopping; the next owner redoes it", "err", err)
			return false
		}
		backoff := wait.Next()
		w.log.Warn(what+" failed; retrying", "err", err, "backoff", backoff)
		if !sleep(stop, backoff) {
			// One last attempt so a graceful shutdown still lands the batch.
			if err := op(); err == nil {
				done()
				return true
			}
			return false
		}
	}
}

// commit hands the partition's progress to the generation's committer.
func (w *worker) commit(b Batch) { w.cm.mark(b.Partition, b.Next()) }

func counted(hs []kafka.Header) bool {
	v, ok := header(hs, event.HeaderCounted)
	return ok && string(v) == "1"
}

func taken(hs []kafka.Header) bool {
	_, ok := header(hs, event.HeaderTake)
	return ok
}

// header returns the value of the first header named key.
func header(hs []kafka.Header, key string) ([]byte, bool) {
	for _, h := range hs {
		if h.Key == key {
			return h.Value, true
		}
	}
	return nil, false
}

// sleep waits d or until ctx ends; it reports whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
