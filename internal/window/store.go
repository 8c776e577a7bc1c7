package window

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/topics"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Redis is what the Store needs of a Redis client: scripts, and pipelines
// of them.
// *redis.Client and *redis.ClusterClient (redis.UniversalClient) satisfy it:
// every script declares a key of the slot it works in, so a cluster client
// routes it to the slot's primary (read-only scripts may go to replicas).
type Redis interface {
	redis.Scripter
	Pipeline() redis.Pipeliner // strict takes of several slots share a round trip
	// TxPipeline reads a slot atomically (a write-back owner's loads).
	TxPipeline() redis.Pipeliner
}

var (
	_ Redis = (*redis.Client)(nil)
	_ Redis = (*redis.ClusterClient)(nil)
)

// StoreConfig configures a Store.
type StoreConfig struct {
	// Prefix names the keys: every key starts with the hash tag
	// "{<prefix>:p<partition>}". Default "fg". Must not contain braces,
	// whitespace or ':'.
	Prefix string
	// Partitions returns the partition count of the events topic (topic
	// metadata, watched): calls that name subjects (Check, Evaluate, Take)
	// find a subject's slot with it, and live's Applier reports events that
	// sit on another partition than their key's. Nil: only applying
	// batches and Resume work.
	Partitions func() int
	// Slack is added to every bucket hash's time to live, so a lookup
	// racing an expiry, or a limiter whose clock is slightly behind, still
	// finds whole windows. Default 1m.
	Slack time.Duration
	// MaxLog bounds each partition's change stream (approximately, entries).
	// The decisions relay trims it as it publishes; this cap only bites when
	// the relay is far behind (the decisions topic down for long), and the
	// relay then reports the entries it lost. Default 100000.
	MaxLog int64
	// MaxTakes bounds each partition's take stream (entries): a strict
	// take that counts while the stream is full leaves its events to its
	// caller to publish, so an owner that stopped relaying costs Redis at
	// most this much. Default 100000; negative: takes queue nothing.
	MaxTakes int64
	// Registerer receives floodgate_redis_seconds{op}. Nil: not registered.
	Registerer prometheus.Registerer
}

// Store keeps multi-level bucket counters, deny records, decision state, a
// change stream and partition offsets in Redis, every key in the slot of
// the Kafka partition that owns its subject. docs/redis.md describes the
// layout. Safe for concurrent use.
type Store struct {
	rdb    Redis
	keys   Keys
	parts  func() int
	slack  time.Duration
	maxLog int64
	// queueMax is MaxTakes, 0 when takes queue nothing
	queueMax int64
	latency  *prometheus.HistogramVec
}

// resumeBody reads a partition's next offset: a script rather than a GET so
// that the Store needs nothing of Redis but scripts.
//
//go:embed resume.lua
var resumeBody string

// The scripts are immutable; redis.Script only caches their SHA. The
// shebang makes Redis refuse a writing script up front when it is out of
// memory, instead of failing half-way.
var (
	resumeScript = redis.NewScript("#!lua flags=no-writes\n" + resumeBody)
)

// NewStore returns a Store over rdb.
func NewStore(rdb Redis, cfg StoreConfig) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("window store: nil redis client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "fg"
	}
	if strings.ContainsAny(cfg.Prefix, "{}: \t\r\n") {
		return nil, fmt.Errorf("window store: key prefix %q must not contain braces, ':' or whitespace", cfg.Prefix)
	}
	switch {
	case cfg.Slack < 0:
		return nil, fmt.Errorf("window store: slack %s is negative", cfg.Slack)
	case cfg.MaxLog < 0:
		return nil, fmt.Errorf("window store: max log %d is negative", cfg.MaxLog)
	}
	if cfg.Slack == 0 {
		cfg.Slack = time.Minute
	}
	if cfg.MaxLog == 0 {
		cfg.MaxLog = 100_000
	}
	if cfg.MaxTakes == 0 {
		cfg.MaxTakes = 100_000
	}
	s := &Store{
		rdb:      rdb,
		keys:     Keys{Prefix: cfg.Prefix},
		parts:    cfg.Partitions,
		slack:    cfg.Slack,
		maxLog:   cfg.MaxLog,
		queueMax: max(cfg.MaxTakes, 0),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "floodgate_redis_seconds",
			Help:    "Redis script round trips of the window store by operation.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"op"}),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.latency); err != nil {
			return nil, fmt.Errorf("window store: register metrics: %w", err)
		}
	}
	return s, nil
}

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.keys.Prefix }

// Keys returns the key layout of the store's prefix.
func (s *Store) Keys() Keys { return s.keys }

// Slack returns the extra time to live of bucket hashes.
func (s *Store) Slack() time.Duration { return s.slack }

// PartitionOf returns the partition, and so the slot, of a subject.
func (s *Store) PartitionOf(sub Subject) (int, error) {
	return s.PartitionOfKey([]byte(sub.Kind + ":" + sub.Subject))
}

// PartitionOfKey returns the partition of an event's Kafka key
// (event.Event.Key), as the producers' partitioner picks it.
func (s *Store) PartitionOfKey(key []byte) (int, error) {
	if s.parts == nil {
		return 0, errors.New("window store: partition count unknown (StoreConfig.Partitions)")
	}
	n := s.parts()
	if n < 1 {
		return 0, fmt.Errorf("window store: partition count %d", n)
	}
	return topics.Partition(key, n), nil
}

// Redis returns the client the store runs its scripts on; the writers of
// the slot (package live's Applier) run theirs on it too.
func (s *Store) Redis() Redis { return s.rdb }

// MaxLog returns the cap on each partition's change stream.
func (s *Store) MaxLog() int64 { return s.maxLog }

// Partitions returns the partition count of the events topic, 0 when
// unknown (StoreConfig.Partitions nil).
func (s *Store) Partitions() int {
	if s.parts == nil {
		return 0
	}
	return s.parts()
}

// Observe records a Redis round trip of op that began at start in
// floodgate_redis_seconds{op}: the slot's writers report theirs beside the
// store's reads.
func (s *Store) Observe(op string, start time.Time) {
	s.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

func (s *Store) observe(op string, start time.Time) { s.Observe(op, start) }

// Resume returns the offset a partition of group resumes from: its
// checkpoint offset when a write-back owner stored one, else its offset;
// ok is false when none is stored.
func (s *Store) Resume(ctx context.Context, group, topic string, partition int) (next int64, ok bool, err error) {
	defer s.observe("resume", time.Now())
	v, err := resumeScript.RunRO(ctx, s.rdb, []string{s.keys.Offset(group, topic, partition), s.keys.Checkpoint(group, topic, partition)}).Text()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read offset group=%s topic=%s partition=%d: %w", group, topic, partition, err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("read offset group=%s topic=%s partition=%d: bad value %q", group, topic, partition, v)
	}
	return n, true, nil
}

// Deny is a deny record: the subject is over Limit (Count events in the
// window) and will be back under it at Until unless more events come. For
// a bucket rule, Bucket is set, Limit.Count is the burst (and Count the
// events it held) and Until is when the bucket is no longer overdrawn. The
// record expires at Until, so its presence alone means "deny".
type Deny struct {
	Rule    string
	Limit   rules.Limit
	Bucket  *rules.Bucket
	Count   int64
	Until   time.Time
	Message string
	// Since is when the decision that made the record was taken (kept while
	// the same rule and window extend it); zero for records written before
	// it was recorded.
	Since time.Time
}

// denyWire is the JSON of deny records; written by the apply script.
type denyWire struct {
	Rule    string      `json:"rule"`
	Limit   int64       `json:"limit"`
	Window  string      `json:"window"`
	Bucket  *bucketWire `json:"bucket,omitempty"`
	Count   int64       `json:"count"`
	Until   int64       `json:"until"` // Unix milliseconds
	Message string      `json:"message"`
	Since   int64       `json:"since,omitempty"` // Unix milliseconds
}

// bucketWire is a bucket rule in records and decisions:
// {"rate":"10/1s","burst":50}.
type bucketWire struct {
	Rate  string `json:"rate"`
	Burst int64  `json:"burst"`
}

func (b *bucketWire) bucket() (*rules.Bucket, error) {
	if b == nil {
		return nil, nil
	}
	rate, err := rules.ParseLimit(b.Rate)
	if err != nil {
		return nil, fmt.Errorf("bucket: %w", err)
	}
	return &rules.Bucket{Rate: rate, Burst: b.Burst}, nil
}

func wireBucket(b *rules.Bucket) *bucketWire {
	if b == nil {
		return nil
	}
	return &bucketWire{Rate: b.Rate.String(), Burst: b.Burst}
}

// limitOf reads a record's limit: a window, or a bucket (no window).
func limitOf(count int64, window string, b *bucketWire) (rules.Limit, *rules.Bucket, error) {
	if b != nil {
		bk, err := b.bucket()
		return rules.Limit{Count: count}, bk, err
	}
	win, err := rules.ParseWindow(window)
	return rules.Limit{Count: count, Window: win}, nil, err
}

// ParseDeny decodes a deny record:
//
//	{"rule":"login-failed","limit":5,"window":"1m","count":6,"until":1767225600000,"message":"...","since":1767225540000}
//	{"rule":"api","limit":50,"window":"","bucket":{"rate":"10/1s","burst":50},"count":53,"until":...}
//
// until and since are in Unix milliseconds, window in the rules file syntax.
func ParseDeny(data []byte) (*Deny, error) {
	var w denyWire
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("deny record: %w", err)
	}
	lim, bk, err := limitOf(w.Limit, w.Window, w.Bucket)
	if err != nil {
		return nil, fmt.Errorf("deny record: %w", err)
	}
	d := &Deny{
		Rule:    w.Rule,
		Limit:   lim,
		Bucket:  bk,
		Count:   w.Count,
		Until:   time.UnixMilli(w.Until).UTC(),
		Message: w.Message,
	}
	if w.Since > 0 {
		d.Since = time.UnixMilli(w.Since).UTC()
	}
	return d, nil
}

// MarshalJSON writes the deny record format (see ParseDeny).
func (d Deny) MarshalJSON() ([]byte, error) {
	w := denyWire{Rule: d.Rule, Limit: d.Limit.Count, Bucket: wireBucket(d.Bucket), Count: d.Count, Until: d.Until.UnixMilli(), Message: d.Message}
	if d.Bucket == nil {
		w.Window = rules.FormatWindow(d.Limit.Window)
	}
	if !d.Since.IsZero() {
		w.Since = d.Since.UnixMilli()
	}
	return json.Marshal(w)
}

// DecisionMessage is a message of the floodgate.decisions topic: a new
// deny (or, for shadow rules, would-be deny) of a subject, or an operator's
// action on one (Type). Not a deny record (Deny): the record is what readers
// look up while it lasts, the message tells once that it was made.
type DecisionMessage struct {
	// ID identifies the decision across redeliveries: publication to the
	// decisions topic is at least once, and a consumer that sees an ID
	// twice has seen one decision. "p<partition>-<change entry id>-<i>".
	ID                    string
	Action, Kind, Subject string
	Rule                  string
	Limit                 rules.Limit
	Bucket                *rules.Bucket // a bucket rule's decision: Limit.Count is the burst
	Count                 int64         // events in the window when decided
	Until                 time.Time     // when the window falls back under the limit
	Shadow                bool
	Message               string
	TS                    time.Time // evaluation time (whole second)
	// Trigger is the time of the subject's latest event in the batch that
	// made the decision (not published: the live delay metric's start).
	Trigger time.Time
	// Type is empty for the aggregator's deny decisions, or the operator
	// action: DecisionBan (Until, Message), DecisionUnban (Rule when only
	// that rule's records were cleared), DecisionReset. See admin.go.
	Type        DecisionType
	Operator    string   // who acted (operator actions)
	Cleared     []string // what an unban or reset removed: deny, shadow, ban, state
	DeletedKeys int64    // counter keys a reset deleted
	Offset      int64    // a reset's boundary: the live group's next offset at the reset; -1 unknown
}

type decisionWire struct {
	ID      string      `json:"id,omitempty"`
	Action  string      `json:"action"`
	Kind    string      `json:"kind"`
	Subject string      `json:"subject"`
	Rule    string      `json:"rule"`
	Limit   int64       `json:"limit"`
	Window  string      `json:"window"`
	Bucket  *bucketWire `json:"bucket,omitempty"`
	Count   int64       `json:"count"`
	Until   int64       `json:"until"`
	Shadow  bool        `json:"shadow"`
	Message string      `json:"message,omitempty"`
	TS      int64       `json:"ts"`
	// operator actions only (admin.go)
	Type     DecisionType `json:"type,omitempty"`
	Operator string       `json:"operator,omitempty"`
	Cleared  []string     `json:"cleared,omitempty"`
	Deleted  int64        `json:"deleted_keys,omitempty"`
	Offset   *int64       `json:"offset,omitempty"`
}

func (w decisionWire) decision() (DecisionMessage, error) {
	var lim rules.Limit
	var bk *rules.Bucket
	if w.Type == "" { // operator actions have no limit
		var err error
		if lim, bk, err = limitOf(w.Limit, w.Window, w.Bucket); err != nil {
			return DecisionMessage{}, fmt.Errorf("decision: %w", err)
		}
	}
	d := DecisionMessage{
		ID: w.ID, Action: w.Action, Kind: w.Kind, Subject: w.Subject, Rule: w.Rule,
		Limit: lim, Bucket: bk, Count: w.Count,
		Shadow: w.Shadow, Message: w.Message, TS: time.UnixMilli(w.TS).UTC(),
		Type: w.Type, Operator: w.Operator, Cleared: w.Cleared, DeletedKeys: w.Deleted, Offset: -1,
	}
	if w.Until != 0 {
		d.Until = time.UnixMilli(w.Until).UTC()
	}
	if w.Offset != nil {
		d.Offset = *w.Offset
	}
	return d, nil
}

// MarshalJSON writes the floodgate.decisions message value: times in Unix
// milliseconds, as in events. Operator actions have their own fields
// (operatorWire).
func (d DecisionMessage) MarshalJSON() ([]byte, error) {
	if d.Type != "" {
		return json.Marshal(d.operatorWire())
	}
	w := decisionWire{
		ID: d.ID, Action: d.Action, Kind: d.Kind, Subject: d.Subject, Rule: d.Rule,
		Limit: d.Limit.Count, Bucket: wireBucket(d.Bucket), Count: d.Count,
		Until: d.Until.UnixMilli(), Shadow: d.Shadow, Message: d.Message, TS: d.TS.UnixMilli(),
	}
	if d.Bucket == nil {
		w.Window = rules.FormatWindow(d.Limit.Window)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a floodgate.decisions message value.
func (d *DecisionMessage) UnmarshalJSON(data []byte) error {
	var w decisionWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	dec, err := w.decision()
	if err != nil {
		return err
	}
	*d = dec
	return nil
}

// LoadScripts loads every script of the Store into Redis (every primary of a
// cluster), so that the first check or take after a start runs by
// its SHA instead of sending and compiling its source within its deadline:
// a strict take's budget is a few hundred milliseconds.
func (s *Store) LoadScripts(ctx context.Context) error {
	for _, sc := range []*redis.Script{resumeScript, evalScript, takeScript, refundScript,
		checkScript, snapshotScript, snapshotPageScript, recordsScript} {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("load scripts: %w", err)
		}
	}
	return nil
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

func replyInt(v []any, i int) int64 {
	if i >= len(v) {
		return 0
	}
	n, _ := v[i].(int64)
	return n
}
