package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/rules"
)

// SinkConfig configures a Sink.
type SinkConfig struct {
	// Applier writes batches into the live store. Required.
	Applier *Applier
	// Group is the consumer group whose offsets the sink keeps (the offset
	// key names it). Required.
	Group string
	// Rules returns the rules in force; called once per batch. Required
	// (reload.Watcher.Current).
	Rules func() *rules.Set
	// Relay, when set, publishes each assigned partition's decisions to the
	// decisions topic from its change stream (RunPartition). Nil: nothing
	// is published (the change stream still records them).
	Relay *Relay
	// TakeRelay, when set, publishes each assigned partition's strict
	// takes' events from its take stream to the events topic.
	TakeRelay *TakeRelay
	// EvaluateAll evaluates every touched subject on every batch, as
	// floodgate did before headroom tracking (benchmarks compare the two).
	// Default false: a batch evaluates only subjects it can have brought to
	// half a limit or more.
	EvaluateAll bool
	// MaxHeadroom bounds the subjects whose headroom one partition
	// remembers. Default 200000.
	MaxHeadroom int
	// PruneEvery is how often the states that say nothing any more are
	// removed from each owned partition's state hash (Applier.Prune),
	// batches or not: an idle partition's hash shrinks too. Default 10s;
	// negative: never (the apply script still removes a few per batch).
	PruneEvery time.Duration
	// CheckpointEvery is how often a write-back Applier's increments kept
	// in memory are written to Redis per partition (Applier.Checkpoint),
	// and MaxPending how many bucket fields may wait in memory before a
	// batch writes them at once. Defaults 1s and 50000; MaxPending at most
	// 10 million (a partition's pending keys fit in 4 GiB). A partition also
	// checkpoints when it is revoked and at shutdown.
	CheckpointEvery time.Duration
	MaxPending      int
	// Takes, when set, has the owner answer strict takes of the
	// partitions it owns (TakeQueued, ownertake.go). It needs an Applier
	// with OwnerTakes and a TakeRelay.
	Takes *TakesConfig
	// Now is the clock windows are evaluated at. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the sink's metrics. Nil: not registered.
	Registerer prometheus.Registerer
}

// MaxPendingFields bounds SinkConfig.MaxPending (and the same setting of
// backtest and rebuild): a field's subject key is
// at most 386 bytes, so a partition's pending keys stay below the 4 GiB its
// table holds.
const MaxPendingFields = 10_000_000

// Validate reports the first problem with c.
func (c *SinkConfig) Validate() error {
	switch {
	case c.Applier == nil:
		return errors.New("live sink: nil applier")
	case c.Group == "":
		return errors.New("live sink: no consumer group")
	case c.Rules == nil:
		return errors.New("live sink: no rules source")
	case c.MaxHeadroom < 0:
		return fmt.Errorf("live sink: max headroom %d is negative", c.MaxHeadroom)
	case c.CheckpointEvery < 0 || c.MaxPending < 0 || c.MaxPending > MaxPendingFields:
		return fmt.Errorf("live sink: checkpoint every %s, max pending %d: want positive values (max pending at most %d) or 0 (default)", c.CheckpointEvery, c.MaxPending, MaxPendingFields)
	case c.Takes != nil && (!c.Applier.OwnerTakes() || c.TakeRelay == nil || c.Takes.Redis == nil || c.Takes.Bounds == nil):
		return errors.New("live sink: owner takes need an applier with owner takes, a take relay, Redis and the end offsets")
	case c.Takes == nil && c.Applier.OwnerTakes():
		return errors.New("live sink: an applier with owner takes counts strict subjects in memory: the sink must answer their takes (Takes)")
	case c.EvaluateAll && c.Applier.WriteBack():
		return errors.New("live sink: write-back evaluates from memory: it cannot evaluate every subject by the script")
	}
	return nil
}

// Sink is the live path's consume.Sink: each batch becomes bucket
// counters, the partition's offset, deny records, decision state and a
// change entry in Redis, in one script run in the partition's slot. New
// decisions leave through the change stream: the Relay publishes them,
// limiters follow it.
type Sink struct {
	cfg SinkConfig
	log *slog.Logger
	m   *sinkMetrics

	// rounds queues owner takes for RunTakes (ownertake.go).
	rounds       chan *takeRound
	takeProfiles takeProfiles
	// reservations are the parts of takes across owners reserved here
	// (ownerreserve.go), by id.
	resMu        sync.Mutex
	reservations map[string]*reservation

	mu    sync.Mutex
	parts map[int]*partState
	// had is the partitions this sink saw an offset of in Redis (Resume,
	// or a batch applied): one whose offset then goes missing lost its
	// data.
	had map[int]bool
}

// partState is what the sink keeps of one partition: its Headroom (and in
// write-back its memory of the counts), used by one batch or one
// checkpoint at a time.
type partState struct {
	mu sync.Mutex
	hr *Headroom
	// due is when the next periodic checkpoint is (write-back).
	due time.Time
	// reread asks the partition's worker to read it again now: a
	// checkpoint dropped its memory (consume.Rereader).
	reread chan string
	// owner takes (ownertake.go): whether they are answered, their
	// overlay, the appends of admitted takes not yet run (a revoke waits
	// for them: the next owner's overlay load must see them), and
	// stopped, closed once the partition is revoked.
	takes   takeGate
	appends sync.WaitGroup
	stopped chan struct{}
	// recountTo: the partition is counted again after Redis lost its slot,
	// the limiter's counted events too before this offset (recount.go);
	// -1 when not.
	recountTo int64
}

var (
	_ consume.Sink            = (*Sink)(nil)
	_ consume.PartitionRunner = (*Sink)(nil)
	_ consume.Rereader        = (*Sink)(nil)
)

// NewSink returns a Sink.
func NewSink(cfg SinkConfig) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxHeadroom == 0 {
		cfg.MaxHeadroom = 200_000
	}
	if cfg.PruneEvery == 0 {
		cfg.PruneEvery = 10 * time.Second
	}
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = time.Second
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = 50_000
	}
	if cfg.Takes != nil && cfg.Takes.MaxInflight <= 0 {
		t := *cfg.Takes
		t.MaxInflight = defaultInflight
		cfg.Takes = &t
	}
	m, err := newSinkMetrics(cfg.Registerer, cfg.Group)
	if err != nil {
		return nil, err
	}
	return &Sink{cfg: cfg, log: cfg.Logger.With("group", cfg.Group), m: m, parts: map[int]*partState{}, had: map[int]bool{}, rounds: make(chan *takeRound, maxTakeRound), reservations: map[string]*reservation{}}, nil
}

// Resume implements consume.Sink. A write-back sink resumes from the
// partition's checkpoint, its memory empty.
func (s *Sink) Resume(ctx context.Context, topic string, partition int) (int64, bool, error) {
	var next int64
	var ok bool
	var err error
	if s.cfg.Applier.WriteBack() {
		p := s.part(partition)
		p.mu.Lock()
		next, ok, err = s.cfg.Applier.Resume(ctx, s.cfg.Group, topic, partition, p.hr)
		if err == nil && s.cfg.Takes != nil {
			s.resumeTakes(ctx, topic, partition, p, next)
		}
		select {
		case <-p.reread: // asked before this resume (a revoke's final checkpoint): done by it
		default:
		}
		p.mu.Unlock()
	} else {
		next, ok, err = s.cfg.Applier.Store().Resume(ctx, s.cfg.Group, topic, partition)
		s.warnWriteBackPast(ctx, topic, partition)
	}
	if ok {
		s.mu.Lock()
		s.had[partition] = true
		s.mu.Unlock()
	}
	if err == nil {
		err = s.resumeRecount(ctx, topic, partition, next, ok)
	}
	return next, ok, err
}

// resumeRecount picks up a recount of the partition its last owner left
// unfinished.
func (s *Sink) resumeRecount(ctx context.Context, topic string, partition int, next int64, ok bool) error {
	to, err := s.readRecount(ctx, topic, partition)
	if err != nil {
		return err
	}
	p := s.part(partition)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.recountTo = -1
	if ok && to > next {
		p.recountTo = to
	}
	return nil
}

// warnWriteBackPast reports, loudly, a partition a write-back owner left
// between a checkpoint and its decisions offset (it stopped without its
// final checkpoint): the window-only counts of those offsets were in its
// memory only, and a write-through sink does not replay them.
func (s *Sink) warnWriteBackPast(ctx context.Context, topic string, partition int) {
	o, err := s.cfg.Applier.readOffsets(ctx, s.cfg.Group, topic, partition)
	if err != nil || !o.cKept {
		return
	}
	if o.held != nil {
		s.log.Warn("write-through resumes a partition whose write-back owner held deny extensions back past its checkpoint: they are not written, so those subjects' denies end as last written unless their next events deny again",
			"topic", topic, "partition", partition, "checkpoint", o.c)
	}
	if o.c >= o.d {
		return
	}
	s.m.unreplayed.WithLabelValues(strconv.Itoa(partition)).Add(float64(o.d - o.c))
	s.log.Error("write-through resumes a partition a write-back owner left unfinished: window-only counts between its checkpoint and decisions offset are not replayed (run the aggregator with --checkpoint-interval > 0 once to replay them, or rebuild)",
		"topic", topic, "partition", partition, "checkpoint", o.c, "decisions", o.d)
}

// part returns the partition's state; its Headroom is nil when every
// subject is to be evaluated.
func (s *Sink) part(partition int) *partState {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.parts[partition]
	if p == nil {
		// The first checkpoint one interval after the start, as every
		// later one after the last, at the partition's own phase.
		p = &partState{due: s.cfg.Now().Add(s.cfg.CheckpointEvery + checkpointPhase(partition, s.cfg.CheckpointEvery)), reread: make(chan string, 1),
			takes: takeGate{target: -1}, stopped: make(chan struct{}), recountTo: -1}
		if !s.cfg.EvaluateAll {
			p.hr = NewHeadroom(s.cfg.MaxHeadroom)
		}
		s.parts[partition] = p
	}
	return p
}

// Rereads implements consume.Rereader. A checkpoint that drops the
// partition's memory asks for it: the decisions its owner held back
// (deferred.go) pin the decisions offset until the partition is read again,
// which an idle partition's next batch could leave for long.
func (s *Sink) Rereads(partition int) <-chan string { return s.part(partition).reread }

// rereadLocked asks the partition's worker to read it again, once.
func (p *partState) rereadLocked(why string) {
	select {
	case p.reread <- why:
	default: // asked already
	}
}

// RunPartition implements consume.PartitionRunner: while this member
// owns the partition, its decisions are relayed to Kafka and its expired
// states pruned. What this member learnt of the partition's subjects is
// forgotten when it stops owning it: the next owner may change them.
func (s *Sink) RunPartition(ctx context.Context, topic string, partition int) {
	var wg sync.WaitGroup
	pctx, stop := context.WithCancel(ctx)
	p := s.part(partition)
	defer func() {
		// The take gate first: no take may count on memory about to go.
		p.mu.Lock()
		p.closeTakes()
		p.mu.Unlock()
		s.waitAppends(partition, p)
		s.handOverLost(context.WithoutCancel(ctx), partition, p)
		stop()
		wg.Wait()
		p.mu.Lock()
		select {
		case <-p.stopped:
		default:
			close(p.stopped)
		}
		p.mu.Unlock()
		// The partition's last batch is applied: write what memory holds,
		// so the next owner replays nothing.
		s.checkpoint(ctx, topic, partition, true)
		s.mu.Lock()
		delete(s.parts, partition)
		s.mu.Unlock()
		s.m.inflight.DeleteLabelValues(strconv.Itoa(partition))
	}()
	if s.cfg.Applier.WriteBack() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Fine ticks: a partition's checkpoint keeps its own phase
			// (checkpointPhase) instead of the tick's.
			t := time.NewTicker(max(s.cfg.CheckpointEvery/16, 10*time.Millisecond))
			defer t.Stop()
			for {
				select {
				case <-pctx.Done():
					return
				case <-t.C:
					s.checkpoint(pctx, topic, partition, false)
					s.reopenTakes(pctx, topic, partition, p)
				}
			}
		}()
	}
	if s.cfg.PruneEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.prune(pctx, partition)
		}()
	}
	if s.cfg.TakeRelay != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.cfg.TakeRelay.Run(pctx, topic, partition)
		}()
	}
	if s.cfg.Relay != nil {
		s.cfg.Relay.Run(ctx, partition)
		return
	}
	<-ctx.Done()
}

// appendsWait bounds how long a revoke waits for its admitted takes'
// appends.
const appendsWait = 10 * time.Second

// waitAppends waits, once the take gate is closed, for the appends of the
// takes already admitted: their entries must be in the take stream before
// the next owner loads it, or it would not count them.
func (s *Sink) waitAppends(partition int, p *partState) {
	if s.cfg.Takes == nil {
		return
	}
	done := make(chan struct{})
	go func() { p.appends.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(appendsWait):
		s.log.Error("owner takes: appends of admitted takes still pending at the revoke; the next owner may not count them until their events arrive (an overshoot of at most those takes)",
			"partition", partition, "waited", appendsWait)
	}
}

// prune removes the partition's states that say nothing any more every
// PruneEvery until ctx ends. A failure is retried at the next tick: what
// is left costs memory only, never a wrong answer.
func (s *Sink) prune(ctx context.Context, partition int) {
	t := time.NewTicker(s.cfg.PruneEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.cfg.Applier.Prune(ctx, partition, s.cfg.Now())
		s.m.pruned.Add(float64(n))
		if err != nil && ctx.Err() == nil {
			s.log.Warn("prune of expired states failed; retrying at the next tick", "partition", partition, "err", err)
		}
	}
}

// checkpointPhase is how far into the checkpoint interval a partition's
// checkpoints fall. A checkpoint is one script that holds Redis for its
// whole run (a few ms per thousand fields); partitions assigned together
// would otherwise checkpoint together, every interval, and every other
// command — a decision a client waits for — would queue behind all of
// them. The golden ratio spreads any number of partitions evenly.
func checkpointPhase(partition int, every time.Duration) time.Duration {
	_, frac := math.Modf(float64(partition) * 0.6180339887498949)
	return time.Duration(frac * float64(every))
}

// finishCheckpoint bounds a checkpoint, which outlives the context it was
// begun under: a stop waits for it.
const finishCheckpoint = 10 * time.Second

// checkpoint writes the partition's memory to Redis when it is due (or
// always, final) and reports how it went. A refused checkpoint has
// forgotten the memory: the next batch reads the partition again from
// Redis's checkpoint.
func (s *Sink) checkpoint(ctx context.Context, topic string, partition int, final bool) {
	if !s.cfg.Applier.WriteBack() {
		return
	}
	s.mu.Lock()
	p := s.parts[partition]
	s.mu.Unlock()
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s.checkpointLocked(ctx, topic, partition, p, final)
}

func (s *Sink) checkpointLocked(ctx context.Context, topic string, partition int, p *partState, final bool) {
	if p.hr == nil {
		return // every subject evaluated by the script: no write-back
	}
	wb := p.hr.wb
	now := s.cfg.Now()
	if wb == nil || (!final && wb.fields < s.cfg.MaxPending && now.Before(p.due)) {
		return
	}
	if every := s.cfg.CheckpointEvery; every > 0 && !p.due.After(now) {
		// the next due time at the partition's phase (ticks missed: skipped)
		p.due = p.due.Add((now.Sub(p.due)/every + 1) * every)
	}
	// A checkpoint begun finishes, even if ctx ends meanwhile (a revoke, a
	// shutdown): cut between its parts, it would drop the memory the final
	// checkpoint writes, and the next owner would replay it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishCheckpoint)
	defer cancel()
	start := time.Now()
	n, err := s.cfg.Applier.Checkpoint(ctx, s.cfg.Group, topic, partition, p.hr, now)
	s.m.checkpointSeconds.Observe(time.Since(start).Seconds())
	switch {
	case errors.Is(err, errFenced):
		s.m.checkpoints.WithLabelValues("fenced").Inc()
		s.log.Warn("checkpoint refused: another writer or an operator moved the partition; its memory is rebuilt from Redis's checkpoint", "partition", partition, "err", err)
		p.closeTakes()
		p.rereadLocked(err.Error())
	case err != nil:
		s.m.checkpoints.WithLabelValues("failed").Inc()
		switch {
		case final:
			s.log.Warn("final checkpoint failed: the next owner replays from the last one", "partition", partition, "err", err)
		case p.hr.wb == nil:
			// parts were written: a retry would write them twice
			s.log.Warn("checkpoint failed after some of its parts were written; memory forgotten, the partition is read again from the last checkpoint", "partition", partition, "err", err)
			p.closeTakes()
			p.rereadLocked(err.Error())
		default:
			s.log.Warn("checkpoint failed; retrying", "partition", partition, "err", err)
		}
	default:
		s.m.checkpoints.WithLabelValues("written").Inc()
		s.m.checkpointFields.Add(float64(n))
	}
}

// Apply implements consume.Sink.
func (s *Sink) Apply(ctx context.Context, b consume.Batch) error {
	p := s.part(b.Partition)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hr != nil && p.hr.wb != nil && p.hr.wb.fields >= s.cfg.MaxPending {
		// Memory holds as much as a checkpoint may carry and the last one
		// failed (Redis unreachable?): write it before counting more, or
		// hold the batch (it is retried) — memory stays bounded.
		s.checkpointLocked(ctx, b.Topic, b.Partition, p, false)
		if p.hr.wb != nil && p.hr.wb.fields >= s.cfg.MaxPending {
			return fmt.Errorf("partition %d: %d bucket fields wait for a checkpoint that fails: holding the batch", b.Partition, p.hr.wb.fields)
		}
	}
	if p.recountTo >= 0 {
		b = s.recounted(b, p)
	}
	res, err := s.cfg.Applier.Apply(ctx, s.cfg.Group, b, s.cfg.Rules(), s.cfg.Now(), p.hr)
	if s.cfg.Takes != nil {
		s.takesApplied(ctx, b, p, err)
	}
	if errors.Is(err, errSlotLost) {
		return s.slotLost(b, err)
	}
	done := time.Now()
	// Runs of a split batch that succeeded before one failed are applied:
	// count them now, their retry will find them held.
	s.count(b, res, done)
	if err != nil {
		return err
	}
	s.mu.Lock()
	lost := res.OffsetMissing && s.had[b.Partition]
	s.had[b.Partition] = true
	s.mu.Unlock()
	if lost {
		// Redis lost the slot (a restart without persistence, a flush):
		// the counts and deny records before this batch are gone, and the
		// script took the batch for a partition's first.
		s.m.offsetMissing.WithLabelValues(strconv.Itoa(b.Partition)).Inc()
		s.log.Error("the partition's offset was missing from Redis although this sink had stored one: Redis lost its data; counts before this batch are gone (rebuild them with floodgate rebuild)",
			"topic", b.Topic, "partition", b.Partition, "first", b.First, "last", b.Last)
	}
	s.checkpointLocked(ctx, b.Topic, b.Partition, p, false)
	switch {
	case res.Duplicate:
		s.m.batches.WithLabelValues("duplicate").Inc()
		s.log.Debug("batch already applied", "partition", b.Partition, "first", b.First, "last", b.Last)
		return nil
	case res.InMemory:
		s.m.batches.WithLabelValues("in_memory").Inc()
	case res.Trimmed > 0:
		s.m.batches.WithLabelValues("trimmed").Inc()
		s.log.Info("batch partly applied already; applied its tail", "partition", b.Partition, "first", b.First, "last", b.Last, "trimmed", res.Trimmed)
	default:
		s.m.batches.WithLabelValues("applied").Inc()
	}
	return nil
}

func (s *Sink) count(b consume.Batch, res ApplyResult, done time.Time) {
	s.m.events.WithLabelValues("applied").Add(float64(res.Applied))
	s.m.events.WithLabelValues("old").Add(float64(res.Old))
	s.m.events.WithLabelValues("counted_by_limiter").Add(float64(res.CountedByLimiter))
	s.m.events.WithLabelValues("no_rule").Add(float64(res.NoRule))
	s.m.events.WithLabelValues("duplicate").Add(float64(res.Duplicates))
	s.m.events.WithLabelValues("reset").Add(float64(res.ResetSkipped))
	s.m.events.WithLabelValues("in_checkpoint_part").Add(float64(res.PartSkipped))
	s.m.replayed.Add(float64(res.Replayed))
	s.m.subjects.WithLabelValues("evaluated").Add(float64(res.Evaluated))
	s.m.subjects.WithLabelValues("skipped").Add(float64(res.Subjects - res.Evaluated))
	s.m.fromCopies.Add(float64(res.Mirrored))
	if res.Misplaced > 0 {
		s.m.misplaced.WithLabelValues(strconv.Itoa(b.Partition)).Add(float64(res.Misplaced))
		s.log.Error("events on another partition than their key's: counted here, where strict takes for their subjects do not look (a producer with another partitioner, keys not of the subject counted: an IPv6 address, an e-mail not normalized; or partitions added)",
			"topic", b.Topic, "partition", b.Partition, "first", b.First, "last", b.Last, "subjects", res.Misplaced)
	}
	for _, d := range res.Decisions {
		s.m.decisions.WithLabelValues(d.Rule, strconv.FormatBool(d.Shadow)).Inc()
		if !d.Shadow {
			s.m.delay.Observe(max(0, done.Sub(d.Trigger).Seconds()))
		}
		s.log.Info("deny", "action", d.Action, "kind", d.Kind, "subject", d.Subject, "rule", d.Rule,
			"limit", d.Limit.String(), "count", d.Count, "until", d.Until, "shadow", d.Shadow)
	}
}

type sinkMetrics struct {
	events     *prometheus.CounterVec
	decisions  *prometheus.CounterVec
	batches    *prometheus.CounterVec
	subjects   *prometheus.CounterVec
	fromCopies prometheus.Counter
	misplaced  *prometheus.CounterVec
	pruned     prometheus.Counter
	delay      prometheus.Histogram
	// offsetMissing: batches that found their partition's offset gone
	// from Redis after this sink had stored one.
	offsetMissing *prometheus.CounterVec
	// write-back
	replayed          prometheus.Counter
	unreplayed        *prometheus.CounterVec
	checkpoints       *prometheus.CounterVec
	checkpointFields  prometheus.Counter
	checkpointSeconds prometheus.Histogram
	// owner takes
	ownerTakes *prometheus.CounterVec
	takeDoubts *prometheus.CounterVec
	inflight   *prometheus.GaugeVec
}

func newSinkMetrics(reg prometheus.Registerer, group string) (*sinkMetrics, error) {
	labels := prometheus.Labels{"group": group}
	m := &sinkMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_events_total", ConstLabels: labels,
			Help: "Events of applied batches by result: applied (counted), old (older than every window of their rules), counted_by_limiter (strict mode counted them), no_rule, duplicate (an id counted already within the dedup horizon), reset (replayed before an operator's reset of their subject: dropped), in_checkpoint_part (replayed, and in Redis already: a part of a checkpoint its last owner did not finish wrote them).",
		}, []string{"result"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_decisions_total", ConstLabels: labels,
			Help: "New decisions by rule; shadow=true for shadow rules (recorded, never denied).",
		}, []string{"rule", "shadow"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_batches_total", ConstLabels: labels,
			Help: "Batches by result: applied, duplicate (already held, redelivered), trimmed (partly held), in_memory (write-back: counted in memory, nothing to write to Redis).",
		}, []string{"result"}),
		subjects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_subjects_total", ConstLabels: labels,
			Help: "Subjects of applied batches: evaluated against their limits, or skipped (too far from every limit for the batch to matter).",
		}, []string{"result"}),
		fromCopies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_live_evaluated_from_copies_total", ConstLabels: labels,
			Help: "Evaluated subjects whose windows the aggregator evaluated from its copies of their buckets (the rest: by the apply script in Redis).",
		}),
		misplaced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_misplaced_subjects_total", ConstLabels: labels,
			Help: "Subjects whose events sat on another partition than murmur2 of their key says (another partitioner, or partitions added): counted in the wrong slot.",
		}, []string{"partition"}),
		offsetMissing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_offset_missing_total", ConstLabels: labels,
			Help: "Batches that found their partition's offset gone from Redis after this sink had stored one: Redis lost its data (counts before them are gone).",
		}, []string{"partition"}),
		checkpoints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_checkpoints_total", ConstLabels: labels,
			Help: "Write-back checkpoints of a partition's counts by result: written, fenced (another writer or an operator moved the partition: its memory is rebuilt from Redis), failed (retried).",
		}, []string{"result"}),
		replayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_live_replayed_events_total", ConstLabels: labels,
			Help: "Events a write-back owner read again between the checkpoint and the decisions offset after a start, rebalance or rewind: counted, not evaluated.",
		}),
		unreplayed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_unreplayed_offsets_total", ConstLabels: labels,
			Help: "Offsets a write-back owner left between its checkpoint and decisions offset that a write-through sink resumed past: their window-only counts are missing.",
		}, []string{"partition"}),
		checkpointFields: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_live_checkpoint_fields_total", ConstLabels: labels,
			Help: "Bucket fields written by write-back checkpoints.",
		}),
		checkpointSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "floodgate_live_checkpoint_seconds", ConstLabels: labels,
			Help:    "Duration of write-back checkpoints.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1},
		}),
		ownerTakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_owner_takes_total", ConstLabels: labels,
			Help: "Strict takes the partition owner answered (--owner-takes) by result: taken, refused (a limit or a ban), not_owner (a partition not answered here now: owned elsewhere, or catching up), fenced (a newer owner fenced the take stream: this member lost the partition and has not noticed yet), failed (an error: the take may have counted), released (a part of a take across owners reserved here, released as another part was refused).",
		}, []string{"result"}),
		takeDoubts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_live_owner_take_doubts_total", ConstLabels: labels,
			Help: "Owner takes' appends settled after a doubt, by outcome: appended_again (Redis lost it after acknowledging it, a failover), landed (no answer came; the stream held it), not_appended (no answer came and it never landed: its take leaves the overlay), handed_over (lost, and the partition left this owner before it was appended again: left to its next owner), taken_over (handed over by the partition's last owner, settled here), dropped (lost, and neither appended again nor handed over: history misses its event).",
		}, []string{"outcome"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_live_owner_takes_inflight", ConstLabels: labels,
			Help: "Owner takes answered whose events the partition's owner has not counted yet (its overlay), at its last tick: near 100000, takes fail (the relay or the apply lags).",
		}, []string{"partition"}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_live_pruned_states_total", ConstLabels: labels,
			Help: "Expired subject states removed from the owned partitions' state hashes by the prune timer.",
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "floodgate_live_decision_delay_seconds", ConstLabels: labels,
			Help:    "From the time of the event that took a subject over a limit to its deny record written in Redis.",
			Buckets: []float64{.002, .005, .01, .02, .03, .05, .075, .1, .2, .5, 1, 2, 5, 10},
		}),
	}
	// Export every series from the start, so rates work from the first scrape.
	for _, r := range []string{"applied", "old", "counted_by_limiter", "no_rule", "duplicate", "reset", "in_checkpoint_part"} {
		m.events.WithLabelValues(r)
	}
	for _, r := range []string{"applied", "duplicate", "trimmed", "in_memory"} {
		m.batches.WithLabelValues(r)
	}
	for _, r := range []string{"evaluated", "skipped"} {
		m.subjects.WithLabelValues(r)
	}
	for _, r := range []string{"written", "fenced", "failed"} {
		m.checkpoints.WithLabelValues(r)
	}
	for _, r := range []string{"taken", "refused", "not_owner", "fenced", "failed", "released"} {
		m.ownerTakes.WithLabelValues(r)
	}
	for _, r := range []string{"appended_again", "landed", "not_appended", "dropped", "handed_over", "taken_over"} {
		m.takeDoubts.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.events, m.decisions, m.batches, m.subjects, m.fromCopies, m.misplaced, m.pruned, m.delay, m.offsetMissing, m.replayed, m.unreplayed, m.checkpoints, m.checkpointFields, m.checkpointSeconds, m.ownerTakes, m.takeDoubts, m.inflight} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("live sink: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

var _ consume.OffsetResetter = (*Sink)(nil)

// ResetOffset implements consume.OffsetResetter.
func (s *Sink) ResetOffset(ctx context.Context, topic string, partition int, from, to int64) error {
	p := s.part(partition)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hr != nil {
		p.hr.drop()
	}
	p.closeTakes()
	return s.cfg.Applier.ResetOffset(ctx, s.cfg.Group, topic, partition, from, to)
}
