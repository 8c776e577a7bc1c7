package backtest

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"

	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
)

// Clock says which time a replay runs on: the time windows are evaluated at
// and deny records are judged by.
type Clock string

const (
	// ClockRecord runs on the records' Kafka timestamps (when they were
	// published, or appended with LogAppendTime): the closest to the live
	// aggregator's own clock when it keeps up, and the time Kafka's time
	// index selects the range by. The default.
	ClockRecord Clock = "record"
	// ClockEvent runs on the events' own times (ts): for topics whose
	// record times say nothing about when events happened (events loaded
	// into a topic after the fact).
	ClockEvent Clock = "event"
)

// The names of the two rules sets in reports and OnDecision.
const (
	Candidate = "candidate"
	Baseline  = "baseline"
)

// Config configures Run. Zero values take the defaults named per field.
type Config struct {
	// Rules is the rules set to backtest. Required.
	Rules *rules.Set
	// RulesName names it in reports (its file). Default "candidate".
	RulesName string
	// Baseline, when set, is replayed over the same stream beside Rules,
	// and the report says what changes: subjects newly denied, no longer
	// denied, or denied differently.
	Baseline     *rules.Set
	BaselineName string // default "baseline"

	// From and To are the range reported, [From, To). The replay starts
	// WarmUp earlier, and reports nothing of the warm-up. Required.
	From, To time.Time
	// WarmUp is how long before From the replay starts. Default twice the
	// rules' longest look-back (rules.Set.MaxWindow): once so that every
	// window is full at From, and once more so that the deny records in
	// force at From are too (a record decided up to a window before From
	// was decided on that window's events). Shorter, windows right after
	// From see fewer events than live did.
	WarmUp time.Duration

	// Brokers and Topic locate the events topic. Required.
	Brokers []string
	Topic   string
	// Security is how to reach the brokers: TLS and SASL (zero: plaintext).
	Security kafkaconn.Security
	// Clock: ClockRecord (default) or ClockEvent.
	Clock Clock
	// MaxFutureSkew is how far ahead of the clock an event may be, as the
	// live aggregator's --max-future-skew: events further ahead, which it
	// dead-letters, are skipped. Default 1m, as the aggregator's.
	MaxFutureSkew time.Duration
	// Dedup, as the live aggregator's --dedup: an event whose id was
	// counted within this horizon is skipped. Default 0 (off).
	Dedup time.Duration
	// Parallel is how many partitions replay at once. Default 4.
	Parallel int
	// MaxSubjects caps the distinct subjects of one script run (a second
	// of one partition with more is applied in several). Default 10000:
	// nothing else uses the replay's Redis.
	MaxSubjects int
	// MaxPending is how many bucket fields one partition counts in memory,
	// per rules set, before it writes them to its Redis, as the live
	// aggregator's --max-pending (its checkpoints): the replay counts as
	// the aggregator's write-back does. Default 50000.
	MaxPending int

	// RedisServer is the redis-server binary the replay runs privately: a
	// unix socket in a temporary directory, no TCP port, no persistence,
	// killed and removed at the end. Default "redis-server" (on PATH).
	RedisServer string
	// RedisServers is how many private servers the replay runs, the
	// partitions spread over them: Redis runs a script on one core, and
	// the replay's work is mostly scripts. Default: half the CPUs, at
	// least 1, at most Parallel.
	RedisServers int
	// Scratch, when set, is used instead of private servers: a Redis the
	// operator names for throwaway work (never the production one: the
	// replay's writes load it). Keys go under a unique prefix and are
	// deleted at the end. One server, not a cluster.
	Scratch *redis.Client

	// FromHistory: when the topic no longer holds the range (retention),
	// replay PostgreSQL's minute buckets instead (History): limits of a
	// minute or more, events at their minute's start. Without it, Run
	// returns the *RetentionError.
	FromHistory bool
	// History is the PostgreSQL pool holding history (required with
	// FromHistory).
	History history.DB

	// Progress receives a progress line every ProgressEvery (default 2s)
	// while the replay runs. Nil: none.
	Progress      io.Writer
	ProgressEvery time.Duration
	// OnDecision, when set, receives every new decision in [From, To) of
	// each rules set (Candidate or Baseline), as the live path would have
	// published it on floodgate.decisions (without an id). It is called
	// from the replay's goroutines, one partition each: it must be safe for
	// concurrent use.
	OnDecision func(set string, d window.DecisionMessage)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.Rules == nil:
		return errors.New("backtest: no rules")
	case len(c.Rules.Rules()) == 0:
		return errors.New("backtest: the rules file has no rules")
	case c.From.IsZero() || c.To.IsZero():
		return errors.New("backtest: from and to are required")
	case !c.From.Before(c.To):
		return fmt.Errorf("backtest: empty range [%s, %s)", c.From.Format(time.RFC3339), c.To.Format(time.RFC3339))
	case len(c.Brokers) == 0 || c.Topic == "":
		return errors.New("backtest: brokers and topic are required")
	case c.Clock != "" && c.Clock != ClockRecord && c.Clock != ClockEvent:
		return fmt.Errorf("backtest: clock %q: want record or event", c.Clock)
	case c.MaxFutureSkew < 0 || c.Dedup < 0 || c.ProgressEvery < 0 || c.WarmUp < 0:
		return errors.New("backtest: warm-up, max future skew, dedup and progress interval must not be negative")
	case c.Parallel < 0 || c.MaxSubjects < 0 || c.MaxPending < 0 || c.RedisServers < 0:
		return errors.New("backtest: parallel, max subjects, max pending and redis servers must not be negative")
	case c.MaxPending > live.MaxPendingFields:
		return fmt.Errorf("backtest: max pending %d: at most %d", c.MaxPending, live.MaxPendingFields)
	case c.FromHistory && c.History == nil:
		return errors.New("backtest: from history needs the PostgreSQL pool")
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.RulesName == "" {
		c.RulesName = Candidate
	}
	if c.BaselineName == "" {
		c.BaselineName = Baseline
	}
	if c.Clock == "" {
		c.Clock = ClockRecord
	}
	if c.WarmUp == 0 {
		c.WarmUp = 2 * max(c.Rules.MaxWindow(), c.Baseline.MaxWindow())
	}
	if c.MaxFutureSkew == 0 {
		c.MaxFutureSkew = time.Minute // consume.DefaultMaxFutureSkew
	}
	if c.Parallel == 0 {
		c.Parallel = 4
	}
	if c.RedisServers == 0 {
		c.RedisServers = min(c.Parallel, max(1, runtime.NumCPU()/2))
	}
	if c.MaxSubjects == 0 {
		c.MaxSubjects = 10_000
	}
	if c.MaxPending == 0 {
		c.MaxPending = 50_000
	}
	if c.RedisServer == "" {
		c.RedisServer = "redis-server"
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}
