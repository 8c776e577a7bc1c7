package live

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/jitter"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// TakeRedis is what the take relay needs of Redis: read the take stream
// (pipelined with its length) and move its cursor (a script that also
// trims what was published).
type TakeRedis interface {
	redis.Scripter
	Get(ctx context.Context, key string) *redis.StringCmd
	Pipeline() redis.Pipeliner
}

var _ TakeRedis = (*redis.Client)(nil)

// TakeRelayConfig configures a TakeRelay.
type TakeRelayConfig struct {
	Store *window.Store // required
	Redis TakeRedis     // required
	// Kafka produces to the events topic, lists its offsets and reads
	// back what a relay that failed mid-publish wrote. Required.
	Kafka *kafka.Client
	// MaxBatch caps the take entries of one produce request. Default 1000.
	MaxBatch int
	// MaxRequestBytes caps the keys and values of one produce request
	// (beyond its first entry), under the broker's default
	// message.max.bytes (1 MiB): a request the broker refused as too large
	// would be sent again forever. Default 512 KiB.
	MaxRequestBytes int
	// Wait is the pause after a read that found the stream empty. Reads
	// do not block: a blocked read holds a pooled connection, and an
	// aggregator owning many partitions would hold most of its pool
	// (the decisions relay already blocks one per partition). Default
	// 200ms: take events are history, not decisions.
	Wait time.Duration
	// Linger is the pause after publishing fewer than MaxBatch entries, so
	// that the next request carries more: a produce request per few takes
	// made the broker the costliest process of a strict take. Default 50ms.
	Linger time.Duration
	// ProduceTimeout bounds one produce request. A relay that takes over a
	// request of unknown outcome waits until one and a half times it has
	// passed since the request (its records land by then) before it reads
	// the partition back. Default 10s.
	ProduceTimeout time.Duration
	// RetryBackoff is the least pause after a failure; the pauses double,
	// jittered, up to 5s. Default 200ms.
	RetryBackoff time.Duration
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
}

// TakeRelay publishes the events of strict takes, which the take script
// appended to their slot's take stream with the count (window.TakeRequest
// Events), to their partition of the events topic, exactly once: the
// owner of the partition relays them in stream order, each produce request
// a single attempt, and a publish whose outcome is unknown (an error, a
// crash) is settled by reading back what reached the partition before
// anything is sent again. The published records carry event.HeaderCounted
// (live sinks skip them: the take counted them) and event.HeaderTake, the
// entry's id, by which the read-back recognises them.
//
// The cursor key (window.Keys.TakesRelay) holds the last entry published
// and, while a produce request is out, that request's last entry, an
// offset the request cannot land before (the end of this relay's previous
// request if that was within a second, else the partition's end) and when
// it was sent: the read-back scans the partition from that offset, for at
// most the records written within ProduceTimeout (plus a minute of clock
// skew) of that time.
//
// Each relay run claims the cursor under a token of its own, and moves it
// only by compare-and-set (takecursor.lua): of two owners of one partition
// at once (a member that has not noticed it was revoked), the one whose
// claim was overwritten fails its next move, before its next request, and
// stops; the one that took over waits until the other's request, if one
// was noted, has landed, reads it back, and goes on. They may take turns
// while both run, never publishing an entry twice. The read-back trusts what the events topic holds: a producer that
// writes records naming take entries, or stamped far in the future, can
// make one pending request's entries count as published or be published
// twice — never more than that request's.
type TakeRelay struct {
	cfg       TakeRelayConfig
	log       *slog.Logger
	published prometheus.Counter
	dropped   prometheus.Counter
	readBacks *prometheus.CounterVec
	restarts  *prometheus.CounterVec
	backlog   *prometheus.GaugeVec
}

// headerTakeSep separates the partition from the entry id in
// event.HeaderTake.
const headerTakeSep = "/"

// NewTakeRelay returns a TakeRelay.
func NewTakeRelay(cfg TakeRelayConfig) (*TakeRelay, error) {
	if cfg.Store == nil || cfg.Redis == nil || cfg.Kafka == nil {
		return nil, errors.New("take relay: store, redis and kafka are required")
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 1000
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 512 << 10
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 200 * time.Millisecond
	}
	if cfg.Linger <= 0 {
		cfg.Linger = 50 * time.Millisecond
	}
	if cfg.ProduceTimeout <= 0 {
		cfg.ProduceTimeout = 10 * time.Second
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &TakeRelay{
		cfg: cfg, log: cfg.Logger.With("component", "take-relay"),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_live_takes_published_total",
			Help: "Strict takes' events published from the take streams to the events topic (exactly once).",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_live_take_events_dropped_total",
			Help: "Take stream fields the take relay could not read (not written by the take script): their events never reach the events topic.",
		}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_take_relay_restarts_total",
			Help: "Take relays of a partition restarted from their cursor after a failure (Redis, Kafka): the partition's take events wait meanwhile.",
		}, []string{"partition"}),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_live_take_backlog",
			Help: "Entries in the partition's take stream at the relay's last read, published or not yet trimmed: near window.StoreConfig.MaxTakes, takes leave their events to the limiter.",
		}, []string{"partition"}),
		readBacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_take_readbacks_total",
			Help: "Publishes of take events whose outcome was unknown (a failed request, a crash), settled by reading the partition back, by what was found (published, not_published).",
		}, []string{"found"}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{r.published, r.dropped, r.readBacks, r.restarts, r.backlog} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("take relay: register metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Run relays the partition's take stream to topic until ctx ends. A
// failure (Redis, Kafka) pauses it, then it starts again from its cursor.
func (r *TakeRelay) Run(ctx context.Context, topic string, partition int) {
	log := r.log.With("topic", topic, "partition", partition)
	wait := jitter.New(r.cfg.RetryBackoff, 5*time.Second)
	restarts := r.restarts.WithLabelValues(strconv.Itoa(partition))
	defer r.backlog.DeleteLabelValues(strconv.Itoa(partition))
	// prev is the last follow's position: what it published, it knows
	// better than a Redis that went back to an older value of its cursor
	var prev *relayState
	for {
		err := r.follow(ctx, topic, partition, log, &prev)
		if ctx.Err() != nil {
			return
		}
		restarts.Inc()
		backoff := wait.Next()
		if errors.Is(err, errTakeRelayFenced) {
			// Another member relays the partition (one of us has not
			// noticed a rebalance yet), or Redis lost or went back on the
			// cursor: nothing is lost, claim it again.
			log.Warn("take relay: the partition's cursor is not what this relay wrote (another relay claimed it, or Redis lost it); claiming it again after a pause", "err", err, "backoff", backoff)
		} else {
			log.Error("take relay failed; the partition's take events wait until it restarts from its cursor", "err", err, "backoff", backoff)
		}
		sleep(ctx, backoff)
	}
}

// takeCursor is the cursor key's value.
type takeCursor struct {
	owner string // the token of the relay run that wrote it; "" before tokens
	last  string // the last entry published; "0-0" for none
	// pending: a produce request whose outcome is not known
	pending string // its last entry; "" for none
	from    int64  // the partition's end offset before it
	since   int64  // when it was sent, Unix ms
}

// String is the cursor as stored: "@<owner> <last>", or with a pending
// request "@<owner> <last> <pending> <from> <since>". Without since (a
// request being noted) the script appends the server's time.
func (c takeCursor) String() string {
	switch {
	case c.pending == "":
		return fmt.Sprintf("@%s %s", c.owner, c.last)
	case c.since == 0:
		return fmt.Sprintf("@%s %s %s %d", c.owner, c.last, c.pending, c.from)
	}
	return fmt.Sprintf("@%s %s %s %d %d", c.owner, c.last, c.pending, c.from, c.since)
}

// parseTakeCursor reads a stored cursor; "" (none stored) is the start.
// Cursors written before owner tokens have no "@<owner>".
func parseTakeCursor(v string) (takeCursor, error) {
	if v == "" {
		return takeCursor{last: "0-0"}, nil
	}
	f := strings.Fields(v)
	var c takeCursor
	if len(f) > 0 && strings.HasPrefix(f[0], "@") {
		c.owner, f = f[0][1:], f[1:]
		if c.owner == "" {
			f = nil // refused below
		}
	}
	switch len(f) {
	case 1:
		c.last = f[0]
		return c, nil
	case 4:
		from, err1 := strconv.ParseInt(f[2], 10, 64)
		since, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 == nil && err2 == nil {
			c.last, c.pending, c.from, c.since = f[0], f[1], from, since
			return c, nil
		}
	}
	return takeCursor{}, fmt.Errorf("take relay cursor %q: want \"@<owner> <id>\" or \"@<owner> <id> <pending id> <offset> <ms>\"", v)
}

// follow claims the cursor, settles a request its last holder left
// pending, and relays until ctx ends (nil) or something fails.
func (r *TakeRelay) follow(ctx context.Context, topic string, partition int, log *slog.Logger, prev **relayState) error {
	rs, wait, err := r.claim(ctx, partition, *prev)
	if err != nil {
		return err
	}
	*prev = rs
	if rs.cur.pending != "" {
		// The request may still be landing (its relay may even be alive,
		// not yet fenced): read back only once it cannot land any more.
		if sleep(ctx, wait); ctx.Err() != nil {
			return nil
		}
		last, err := r.settle(ctx, topic, partition, rs.cur, log)
		if err != nil {
			return err
		}
		if err := r.moveCursor(ctx, partition, rs, last); err != nil {
			return err
		}
	}
	for ctx.Err() == nil {
		msgs, err := r.read(ctx, partition, rs)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if len(msgs) == 0 {
			sleep(ctx, r.cfg.Wait)
			continue
		}
		if err := r.publish(ctx, topic, partition, rs, msgs, log); errors.Is(err, errTakeBatchChanged) {
			continue // a refund took an entry back: read them again
		} else if err != nil {
			return err
		}
		if len(msgs) < r.cfg.MaxBatch {
			sleep(ctx, r.cfg.Linger)
		}
	}
	return nil
}

// errTakeRelayFenced is a cursor move refused: another relay run of the
// partition claimed the cursor.
var errTakeRelayFenced = errors.New("another take relay of the partition claimed its cursor")

// errTakeBatchChanged is a request not noted: a refund deleted one of its
// entries since they were read. They are read again.
var errTakeBatchChanged = errors.New("take stream entries deleted since they were read")

// takeCursorBody moves a take relay's cursor (see its header).
//
//go:embed takecursor.lua
var takeCursorBody string

var takeCursorScript = redis.NewScript("#!lua\n" + takeCursorBody)

// takecursor.lua's reply codes.
const (
	cursorMoved   = 0 // MOVED
	cursorFenced  = 1 // FENCED: the cursor is not what this run wrote
	cursorChanged = 2 // CHANGED: the request's entries are not all there
)

// claim puts the cursor under a token of this run's own and returns how
// long the request it notes pending, if any, may still take to land:
// one and a half produce timeouts after it was noted, by Redis's clock.
//
// prev is this relay's last run of the partition (nil: none): a cursor
// holding an older value of its token is one Redis went back to (a
// failover to a replica that lacked its last moves), and prev's position
// is taken instead, or entries it published would go out again.
func (r *TakeRelay) claim(ctx context.Context, partition int, prev *relayState) (*relayState, time.Duration, error) {
	key := r.cfg.Store.Keys().TakesRelay(partition)
	raw, err := r.cfg.Redis.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		raw, err = "", nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", key, err)
	}
	cur, err := parseTakeCursor(raw)
	if err != nil {
		return nil, 0, err
	}
	if prev != nil && prev.cur.owner != "" && cur.owner == prev.cur.owner && raw != prev.raw {
		r.log.Warn("take relay: Redis lost the cursor's last moves (a failover); going on from this relay's own", "partition", partition, "found", raw, "ours", prev.raw)
		cur = prev.cur
	}
	cur.owner = strconv.FormatUint(rand.Uint64(), 36)
	rs := &relayState{raw: raw}
	now, err := r.write(ctx, partition, rs, cur, "")
	if err != nil {
		return nil, 0, err
	}
	var wait time.Duration
	if cur.pending != "" {
		within := r.cfg.ProduceTimeout * 3 / 2
		wait = min(max(time.Duration(cur.since-now)*time.Millisecond+within, 0), within)
	}
	return rs, wait, nil
}

// write sets the cursor to c by compare-and-set over the value this run
// last wrote or read (rs.raw), and trims the stream's entries before keep
// ("": none). Noting a request, it stamps it with Redis's time, and
// refuses with errTakeBatchChanged when a refund deleted an entry since
// the request's entries were read (rs.refunds). It returns Redis's time,
// in ms.
func (r *TakeRelay) write(ctx context.Context, partition int, rs *relayState, c takeCursor, keep string) (int64, error) {
	return r.writeCursor(ctx, partition, rs, c, keep, false)
}

func (r *TakeRelay) writeCursor(ctx context.Context, partition int, rs *relayState, c takeCursor, keep string, again bool) (int64, error) {
	keys := r.cfg.Store.Keys()
	key := keys.TakesRelay(partition)
	args := []any{rs.raw, c.String(), "", keep}
	if c.pending != "" && c.since == 0 {
		args[2] = "1"
		args = append(args, rs.refunds)
	}
	out, err := takeCursorScript.Run(ctx, r.cfg.Redis, []string{key, keys.Takes(partition), keys.TakesRefunds(partition)}, args...).Slice()
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", key, err)
	}
	if len(out) != 3 {
		return 0, fmt.Errorf("write %s: reply %v", key, out)
	}
	v, _ := out[1].(string)
	now, err := strconv.ParseInt(fmt.Sprint(out[2]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("write %s: time %v", key, out[2])
	}
	switch replyInt(out, 0) {
	case cursorMoved:
	case cursorChanged:
		return 0, errTakeBatchChanged
	case cursorFenced:
		if found, err := parseTakeCursor(v); err == nil && !again && found.owner != "" && found.owner == rs.cur.owner {
			// No other run writes this run's token: Redis went back to
			// an older value of ours (a failover to a replica that lacked
			// our last moves). What this run published since, it knows;
			// read back from the older value, it would publish it twice.
			r.log.Warn("take relay: Redis lost the cursor's last moves (a failover); writing this run's own again", "partition", partition, "found", v, "ours", rs.raw)
			rs.raw = v
			return r.writeCursor(ctx, partition, rs, c, keep, true)
		}
		return 0, fmt.Errorf("take relay cursor %s is %q, not %q: %w", key, v, rs.raw, errTakeRelayFenced)
	default:
		return 0, fmt.Errorf("write %s: reply code %v", key, out[0])
	}
	if rs.cur, err = parseTakeCursor(v); err != nil {
		return 0, err
	}
	rs.raw = v
	return now, nil
}

// read returns up to MaxBatch entries after the cursor's last, notes the
// refunds counter before them in rs, and sets the backlog gauge from the
// stream's length, in one round trip. Reads never block
// (TakeRelayConfig.Wait says why).
//
// The round trip also checks the cursor is still what this run wrote: a
// Redis that lost it (a restart without persistence, a flush) may hold
// entries appended since at or below the run's last, which reads after
// that last would pass by forever; a relay with nothing to publish never
// moves the cursor, so the move's fence would not tell it. It fails with
// errTakeRelayFenced, and the claim that follows starts from what Redis
// holds.
func (r *TakeRelay) read(ctx context.Context, partition int, rs *relayState) ([]redis.XMessage, error) {
	keys := r.cfg.Store.Keys()
	key := keys.Takes(partition)
	pipe := r.cfg.Redis.Pipeline()
	cursor := pipe.Get(ctx, keys.TakesRelay(partition))
	// the counter first: a refund between it and the read then fails the
	// note, where one after the read would go unseen
	refunds := pipe.Get(ctx, keys.TakesRefunds(partition))
	read := pipe.XRead(ctx, &redis.XReadArgs{Streams: []string{key, rs.cur.last}, Count: int64(r.cfg.MaxBatch), Block: -1})
	size := pipe.XLen(ctx, key)
	_, _ = pipe.Exec(ctx) // errors are read per command
	if n, err := size.Result(); err == nil {
		r.backlog.WithLabelValues(strconv.Itoa(partition)).Set(float64(n))
	}
	switch v, err := cursor.Result(); {
	case err != nil && !errors.Is(err, redis.Nil):
		return nil, fmt.Errorf("read %s: %w", keys.TakesRelay(partition), err)
	case v != rs.raw:
		return nil, fmt.Errorf("read: take relay cursor %s is %q, not %q as this relay left it: %w", keys.TakesRelay(partition), v, rs.raw, errTakeRelayFenced)
	}
	switch v, err := refunds.Result(); {
	case errors.Is(err, redis.Nil):
		rs.refunds = "0"
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", keys.TakesRefunds(partition), err)
	default:
		rs.refunds = v
	}
	res, err := read.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read take stream partition=%d: %w", partition, err)
	case len(res) == 0:
		return nil, nil
	}
	return res[0].Messages, nil
}

// relayState is a follow's position: the cursor, and where this relay's
// last produce request ended in the partition, and when.
type relayState struct {
	cur     takeCursor
	raw     string // the cursor as this run last wrote or read it
	refunds string // the refunds counter before the last read of entries
	next    int64  // offset after the last records produced; 0: unknown
	nextAt  time.Time
}

// from is a lower bound of the offset the next produce request lands at,
// for a read-back to start from: where this relay's last request ended,
// when that was recent (a read-back then scans a second of records at
// most), else the partition's end.
func (r *TakeRelay) from(ctx context.Context, topic string, partition int, rs *relayState) (int64, error) {
	if rs.next > 0 && time.Since(rs.nextAt) < time.Second {
		return rs.next, nil
	}
	f, err := r.fetcher(topic, partition, 0)
	if err != nil {
		return 0, err
	}
	_, end, err := f.Bounds(ctx)
	return end, err
}

// moveCursor sets the cursor past last and trims what it passed, in one
// script run.
func (r *TakeRelay) moveCursor(ctx context.Context, partition int, rs *relayState, last string) error {
	keep := ""
	if last != "0-0" {
		keep = nextStreamID(last)
	}
	_, err := r.write(ctx, partition, rs, takeCursor{owner: rs.cur.owner, last: last}, keep)
	return err
}

// publish sends entries in one produce request, as many as fit
// MaxRequestBytes (at least one), and moves the cursor past them; the
// rest are read again. A request that fails leaves the cursor pending for
// settle.
func (r *TakeRelay) publish(ctx context.Context, topic string, partition int, rs *relayState, msgs []redis.XMessage, log *slog.Logger) error {
	now := time.Now()
	var records []kafka.Record
	size := 0
	for i, m := range msgs {
		if i > 0 && size >= r.cfg.MaxRequestBytes {
			msgs = msgs[:i]
			break
		}
		take := kafka.Header{Key: event.HeaderTake, Value: []byte(strconv.Itoa(partition) + headerTakeSep + m.ID)}
		counted := []kafka.Header{{Key: event.HeaderCounted, Value: []byte("1")}, take}
		for field, v := range m.Values {
			hs := counted
			if strings.HasPrefix(field, ownerTakeField) {
				// an owner's take (stage B): counted by the apply, not here
				hs = []kafka.Header{take}
			}
			s, _ := v.(string)
			key, value, err := window.ParseQueuedEvent(s)
			if err != nil {
				// Only the take script writes the stream: this is a bug or
				// a foreign write, and the event is lost to history.
				log.Error("take relay: unreadable take event dropped; history misses it", "entry", m.ID, "field", field, "err", err)
				r.dropped.Inc()
				continue
			}
			records = append(records, kafka.Record{Time: now, Key: kafka.NewBytes(key), Value: kafka.NewBytes(value), Headers: hs})
			size += len(key) + len(value)
		}
	}
	last := msgs[len(msgs)-1].ID
	if len(records) == 0 {
		return r.moveCursor(ctx, partition, rs, last)
	}
	from, err := r.from(ctx, topic, partition, rs)
	if err != nil {
		return err
	}
	// Noted, the request is this run's to send: a relay that claimed the
	// cursor before it fails here instead.
	if _, err := r.write(ctx, partition, rs, takeCursor{owner: rs.cur.owner, last: rs.cur.last, pending: last, from: from}, ""); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ProduceTimeout)
	res, err := r.cfg.Kafka.Produce(pctx, &kafka.ProduceRequest{
		Topic: topic, Partition: partition, RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(records...),
	})
	cancel()
	if err == nil && res.Error != nil {
		err = res.Error
	}
	if err != nil {
		// The request may still land: the restart claims the cursor and
		// reads the partition back before it sends anything again.
		return fmt.Errorf("produce %d take entries: %w", len(msgs), err)
	}
	r.published.Add(float64(len(records)))
	if res.BaseOffset > 0 || from == 0 {
		rs.next, rs.nextAt = res.BaseOffset+int64(len(records)), time.Now()
	}
	// Published: moved even when the partition was revoked meanwhile, or
	// its next owner would wait out the request before reading it back.
	// Should the cursor not move, that is what happens, and the batch is
	// not sent again.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return r.moveCursor(mctx, partition, rs, last)
}

// settle finds how much of a pending produce request reached the
// partition: it reads from the offset noted before the request, for the
// records written until the request could have landed, and returns the
// last of its entries found there (the cursor's last when none was).
func (r *TakeRelay) settle(ctx context.Context, topic string, partition int, cur takeCursor, log *slog.Logger) (string, error) {
	f, err := r.fetcher(topic, partition, cur.from)
	if err != nil {
		return "", err
	}
	_, end, err := f.Bounds(ctx)
	if err != nil {
		return "", err
	}
	// Our records carry the time they were sent; others' their own
	// producers' clocks: a minute of skew either way.
	deadline := time.UnixMilli(cur.since).Add(r.cfg.ProduceTimeout + time.Minute)
	prefix := strconv.Itoa(partition) + headerTakeSep
	found := cur.last
	scanned := 0
scan:
	for f.Next() < end {
		msgs, err := f.Fetch(ctx)
		var unreadable *consume.UnreadableError
		var lost *consume.LostOffsetsError
		switch {
		case errors.As(err, &unreadable):
			// Not ours (a batch past the decompression bound): the
			// Fetcher moved past it.
			continue
		case errors.As(err, &lost):
			// Retention deleted what the scan starts from: what is left
			// is read, or the settle would fail forever.
			f.SetOffset(lost.To)
			continue
		case err != nil:
			return "", fmt.Errorf("read back partition=%d from %d: %w", partition, cur.from, err)
		}
		for _, m := range msgs {
			scanned++
			if m.Time.After(deadline) {
				break scan
			}
			// Only ids of the pending request count: a record that names
			// a later entry is not this relay's, and believing it would
			// skip entries never published.
			id, ok := takeHeader(m.Headers, prefix)
			if ok && streamIDLess(found, id) && !streamIDLess(cur.pending, id) {
				found = id
			}
			if found == cur.pending {
				break scan
			}
		}
	}
	outcome := "not_published"
	if found != cur.last {
		outcome = "published"
	}
	r.readBacks.WithLabelValues(outcome).Inc()
	log.Info("take relay: settled a publish of unknown outcome", "pending_last", cur.pending, "published_up_to", found, "from_offset", cur.from, "scanned", scanned)
	return found, nil
}

func (r *TakeRelay) fetcher(topic string, partition int, offset int64) (*consume.Fetcher, error) {
	return consume.NewFetcher(consume.FetcherConfig{Client: r.cfg.Kafka, Topic: topic, Partition: partition, Offset: offset, MaxWait: 100 * time.Millisecond})
}

func takeHeader(hs []kafka.Header, prefix string) (string, bool) {
	for _, h := range hs {
		if h.Key == event.HeaderTake {
			return strings.CutPrefix(string(h.Value), prefix)
		}
	}
	return "", false
}
