package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/internal/feed"
	"github.com/floodgate-dev/floodgate/internal/jitter"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// MessageWriter publishes decisions; *kafka.Writer satisfies it.
type MessageWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

var _ MessageWriter = (*kafka.Writer)(nil)

// RelayRedis is what the relay needs of Redis: follow the stream, keep its
// cursor, trim what every reader has had time to read.
type RelayRedis interface {
	feed.Streams
	Get(ctx context.Context, key string) *redis.StringCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	XTrimMinIDApprox(ctx context.Context, key, minID string, limit int64) *redis.IntCmd
}

var _ RelayRedis = (*redis.Client)(nil)

// RelayConfig configures a Relay.
type RelayConfig struct {
	Store  *window.Store // required
	Redis  RelayRedis    // required
	Writer MessageWriter // the decisions topic; required
	// Keep is how long change entries stay in the stream after they were
	// published, for limiters that reconnect (one that falls further
	// behind loads a snapshot instead). Default 1m.
	Keep time.Duration
	// RetryBackoff is the least pause after a failed publish; the pauses
	// double, jittered (relays that fail together, as in a Redis failover,
	// do not retry together), up to 5s. Default 200ms.
	RetryBackoff time.Duration
	Now          func() time.Time
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
}

// Relay publishes the decisions of a partition's change stream to the
// decisions topic, at least once: it publishes from its cursor (kept in
// the partition's slot) and moves the cursor only after Kafka acknowledged,
// so a crash in between publishes those decisions again — with the same
// ids, by which a consumer recognises them. A decision is therefore never
// lost between "counted" and "published", whatever crashes.
type Relay struct {
	cfg       RelayConfig
	log       *slog.Logger
	feed      *feed.Metrics
	published prometheus.Counter
	lost      *prometheus.CounterVec
	running   *prometheus.GaugeVec
	restarts  *prometheus.CounterVec
}

// NewRelay returns a Relay.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	if cfg.Store == nil || cfg.Redis == nil || cfg.Writer == nil {
		return nil, errors.New("relay: store, redis and writer are required")
	}
	if cfg.Keep <= 0 {
		cfg.Keep = time.Minute
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 200 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	fm, err := feed.NewMetrics(cfg.Registerer, "floodgate_live_relay")
	if err != nil {
		return nil, err
	}
	r := &Relay{
		cfg: cfg, log: cfg.Logger.With("component", "relay"), feed: fm,
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_live_decisions_published_total",
			Help: "Decisions published to the decisions topic (at least once: a crash between publish and cursor publishes again).",
		}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_decisions_lost_total",
			Help: "Change entries gone from the stream before the relay published them (trimmed while the topic was unreachable for long, or lost with a Redis primary): their decisions never reach the topic.",
		}, []string{"partition"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_live_relay_running",
			Help: "1 while the partition's relay follows its change stream, 0 while it restarts after a failure (its decisions wait).",
		}, []string{"partition"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_relay_restarts_total",
			Help: "Relays of a partition restarted from their cursor after a failure (a Redis write).",
		}, []string{"partition"}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{r.published, r.lost, r.running, r.restarts} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("relay: register metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Run relays one partition until ctx ends, then publishes what it has read
// (a graceful stop leaves nothing for the next owner to send again). A
// relay that fails (a Redis write of its cursor) starts again from its
// cursor after a pause, so the partition's decisions keep going out
// without waiting for a rebalance; floodgate_live_relay_running shows 0
// for the partition meanwhile.
func (r *Relay) Run(ctx context.Context, partition int) {
	log := r.log.With("partition", partition)
	running := r.running.WithLabelValues(strconv.Itoa(partition))
	defer r.running.DeleteLabelValues(strconv.Itoa(partition))
	// At zero from the start: increase() sees a first loss or restart.
	r.lost.WithLabelValues(strconv.Itoa(partition))
	r.restarts.WithLabelValues(strconv.Itoa(partition))
	wait := jitter.New(r.cfg.RetryBackoff, 5*time.Second)
	for {
		running.Set(1)
		err := r.follow(ctx, partition, log)
		running.Set(0)
		if ctx.Err() != nil {
			return
		}
		r.restarts.WithLabelValues(strconv.Itoa(partition)).Inc()
		backoff := wait.Next()
		log.Error("relay failed; decisions of the partition wait until it restarts from its cursor", "err", err, "backoff", backoff)
		sleep(ctx, backoff)
	}
}

// follow publishes the partition's decisions from its cursor until ctx ends
// (nil) or something fails.
func (r *Relay) follow(ctx context.Context, partition int, log *slog.Logger) error {
	keys := r.cfg.Store.Keys()
	var id string
	var seq int64
	// A flat pause as before, jittered: after a failover every relay
	// reads its cursor at once.
	wait := jitter.New(r.cfg.RetryBackoff, 2*r.cfg.RetryBackoff)
	for {
		var err error
		id, seq, err = r.cursor(ctx, keys.Relay(partition))
		if err == nil || ctx.Err() != nil {
			break
		}
		log.Warn("read relay cursor; retrying", "err", err)
		sleep(ctx, wait.Next())
	}
	if ctx.Err() != nil {
		return nil
	}
	h := &relayHandler{r: r, partition: partition, log: log, keys: keys, id: id, seq: seq}
	err := feed.Follow(ctx, feed.Config{
		Source: r.cfg.Store, Streams: r.cfg.Redis, Partition: partition, Handler: h, SkipStates: true,
		From: id, FromSeq: seq, Metrics: r.feed, Now: r.cfg.Now, Logger: log,
		OnGap: func(p int, want, got int64) {
			if got < want {
				// A failover to a replica that lacked the last entries:
				// their sequence numbers come again, on new entries (the
				// batches applied again), which are published as they come.
				log.Warn("change stream went back (a failover): sequence numbers repeat", "want_seq", want, "got_seq", got)
				return
			}
			r.lost.WithLabelValues(strconv.Itoa(p)).Add(float64(got - want))
			log.Error("decisions lost: change entries gone before they were published", "want_seq", want, "got_seq", got, "lost_entries", got-want)
		},
		Flush: h.flush,
	})
	if err != nil && ctx.Err() == nil {
		// Published decisions whose cursor did not move are published
		// again by the restart, with the same ids.
		return err
	}
	// The last entries read are published even when ctx ended mid-way.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := h.flush(fctx); err != nil {
		log.Warn("relay stopped with decisions unpublished; the next owner publishes them", "pending", len(h.msgs), "err", err)
	}
	return nil
}

// cursor reads "<entry id> <seq>" of the last published entry ("0-0", 0
// when none: everything in the stream is published).
func (r *Relay) cursor(ctx context.Context, key string) (string, int64, error) {
	v, err := r.cfg.Redis.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "0-0", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", key, err)
	}
	id, s, _ := strings.Cut(v, " ")
	seq, _ := strconv.ParseInt(s, 10, 64)
	return id, seq, nil
}

// relayHandler gathers one partition's decisions between flushes.
type relayHandler struct {
	r         *Relay
	partition int
	log       *slog.Logger
	keys      window.Keys
	msgs      []kafka.Message
	id        string // last entry read
	seq       int64
	dirty     bool // entries read since the cursor was written
}

func (h *relayHandler) Reset(int, window.Snapshot) {} // never called: the relay follows From

func (h *relayHandler) Apply(partition int, c window.Change) {
	for i, d := range c.Decisions {
		d.ID = "p" + strconv.Itoa(partition) + "-" + c.ID + "-" + strconv.Itoa(i)
		v, err := json.Marshal(d)
		if err != nil {
			h.log.Error("encode decision; not published", "id", d.ID, "err", err)
			continue
		}
		h.msgs = append(h.msgs, kafka.Message{Key: []byte(d.Kind + ":" + d.Subject), Value: v, Time: d.TS})
	}
	h.id, h.seq, h.dirty = c.ID, c.Seq, true
}

// flush publishes the gathered decisions, retrying until Kafka takes them
// or ctx ends, then moves the cursor and trims the stream.
func (h *relayHandler) flush(ctx context.Context) error {
	if !h.dirty {
		return nil
	}
	wait := jitter.New(h.r.cfg.RetryBackoff, 5*time.Second)
	for len(h.msgs) > 0 {
		err := h.r.cfg.Writer.WriteMessages(ctx, h.msgs...)
		if err == nil {
			h.r.published.Add(float64(len(h.msgs)))
			h.msgs = h.msgs[:0]
			break
		}
		if ctx.Err() != nil {
			return err
		}
		backoff := wait.Next()
		h.log.Warn("publish decisions; retrying", "count", len(h.msgs), "err", err, "backoff", backoff)
		sleep(ctx, backoff)
	}
	key := h.keys.Relay(h.partition)
	if err := h.r.cfg.Redis.Set(ctx, key, h.id+" "+strconv.FormatInt(h.seq, 10), 0).Err(); err != nil {
		// Published but the cursor stayed: published again later, which
		// the decision ids make recognisable.
		return fmt.Errorf("write relay cursor %s: %w", key, err)
	}
	h.dirty = false
	minID := min(idMillis(h.id), h.r.cfg.Now().Add(-h.r.cfg.Keep).UnixMilli())
	if err := h.r.cfg.Redis.XTrimMinIDApprox(ctx, h.keys.Log(h.partition), strconv.FormatInt(minID, 10), 0).Err(); err != nil {
		h.log.Debug("trim change stream", "err", err)
	}
	return nil
}

func idMillis(id string) int64 {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return n
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
