package backtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// Kept in the replay's Redis far longer than any replay runs: Redis
// expires keys on its wall clock, which runs at another pace than the
// replay's, so it must never expire one the replay still reads. The
// replay deletes buckets itself by its own clock (expirer); deny records
// whose until has passed count as none.
const replayKeep = 30 * 24 * time.Hour

// Run backtests cfg.Rules (and cfg.Baseline) over the events of
// [cfg.From, cfg.To): it replays the events topic from Kafka's time index,
// partitions in parallel, through the live path's own writer (live.Applier:
// the same batching, profiles, headroom and Lua scripts) over a private
// Redis, and reports what each rules set would have denied. It writes to no
// production Redis, moves no consumer group's offsets and commits nothing.
//
// When the topic no longer holds the range it returns a *RetentionError,
// unless cfg.FromHistory: then it replays PostgreSQL's minute buckets.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	need := cfg.From.Add(-cfg.WarmUp)
	rep := &Report{Source: "kafka", Topic: cfg.Topic, From: cfg.From.UTC(), To: cfg.To.UTC(), ReadFrom: need.UTC(), Clock: cfg.Clock,
		Precision: "exact: every event at its own time, through the live path's store and scripts"}

	client := cfg.Security.Client(cfg.Brokers, 30*time.Second, nil)
	spans, err := plan(ctx, client, cfg.Topic, need, cfg.To, cfg.WarmUp, cfg.Clock)
	var retention *RetentionError
	switch {
	case errors.As(err, &retention) && cfg.FromHistory:
		cfg.Logger.Warn("backtest: the topic no longer holds the range; replaying PostgreSQL's minute buckets", "reason", err)
		rep.Source, rep.Retention, rep.Precision, rep.Clock = "history", err.Error(), HistoryPrecision, ClockEvent
	case err != nil:
		return nil, err
	}
	sets, err := replaySets(&cfg, rep)
	if err != nil {
		return nil, err
	}
	merged, err := replay(ctx, &cfg, client, spans, sets, need, rep)
	if err != nil {
		return nil, err
	}
	rep.Candidate = outcome(cfg.RulesName, merged[0])
	if len(merged) > 1 {
		rep.Baseline = outcome(cfg.BaselineName, merged[1])
		rep.Changes, rep.Unchanged = diff(rep.Candidate, rep.Baseline, merged[0], merged[1])
	}
	return rep, nil
}

// replaySets are the rules sets as replayed: as given from Kafka; from
// history, what minute buckets can answer of them (the report says what
// was left out).
func replaySets(cfg *Config, rep *Report) ([]*rules.Set, error) {
	sets := []*rules.Set{cfg.Rules, cfg.Baseline}
	if rep.Source != "history" {
		return sets, nil
	}
	for i, s := range sets {
		if s == nil {
			continue
		}
		var dropped []string
		sets[i], dropped = historyRules(s)
		for _, d := range dropped {
			if i == 1 {
				d = "baseline " + d
			}
			rep.Dropped = append(rep.Dropped, d)
		}
	}
	if len(sets[0].Rules()) == 0 {
		return nil, errNoRules
	}
	return sets, nil
}

// replay runs the replay on its own Redis servers and returns each rules
// set's tallies, filling in the report's counts and speed.
func replay(ctx context.Context, cfg *Config, client *kafka.Client, spans []span, sets []*rules.Set, need time.Time, rep *Report) ([]*tallies, error) {
	clients, done, err := replayRedis(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer done()
	backends, err := newBackends(clients, cfg, sets)
	if err != nil {
		return nil, err
	}
	defer cleanScratch(cfg, backends)
	start := time.Now()
	var merged []*tallies
	if rep.Source == "kafka" {
		merged, err = runKafka(ctx, client, cfg, backends, spans, rep)
	} else {
		merged, err = runHistory(ctx, cfg, backends, sets, need, rep)
	}
	if err != nil {
		return nil, err
	}
	rep.Seconds = time.Since(start).Seconds()
	if rep.Seconds > 0 {
		rep.EventsPerSecond = float64(rep.Events) / rep.Seconds
	}
	if cfg.Scratch == nil {
		for _, c := range clients {
			n, err := peakMemory(ctx, c)
			if err != nil {
				cfg.Logger.Warn("backtest: redis peak memory", "err", err)
			}
			rep.RedisPeakBytes += n
		}
	}
	return merged, nil
}

// replayRedis returns the replay's Redis servers: cfg.RedisServers
// private ones, or the scratch one; done stops the servers.
func replayRedis(ctx context.Context, cfg *Config) ([]*redis.Client, func(), error) {
	if cfg.Scratch != nil {
		return []*redis.Client{cfg.Scratch}, func() {}, nil
	}
	var clients []*redis.Client
	var servers []*server
	done := func() {
		for i, c := range clients {
			if err := c.Close(); err != nil {
				cfg.Logger.Warn("backtest: close redis client", "err", err)
			}
			if err := servers[i].Close(); err != nil {
				cfg.Logger.Warn("backtest: stop redis-server", "err", err)
			}
		}
	}
	pool := 2*(cfg.Parallel+cfg.RedisServers-1)/cfg.RedisServers + 2
	for range cfg.RedisServers {
		srv, rdb, err := startServer(ctx, cfg.RedisServer, pool)
		if err != nil {
			done()
			return nil, nil, err
		}
		servers, clients = append(servers, srv), append(clients, rdb)
	}
	return clients, done, nil
}

// backend is one Redis of the replay with a store per rules set on it.
// Partitions are spread over the backends: a partition's keys are its own.
type backend struct {
	rdb    *redis.Client
	stores []ruleSet
}

// newBackends makes the stores of every rules set on every Redis, each set
// under its own prefix: "backtest-", a random suffix (unique on a scratch
// Redis shared with others) and the set's name.
func newBackends(clients []*redis.Client, cfg *Config, sets []*rules.Set) ([]backend, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	base := "backtest-" + hex.EncodeToString(b[:])
	names := []string{Candidate, Baseline}
	out := make([]backend, len(clients))
	for k, rdb := range clients {
		out[k].rdb = rdb
		for i, s := range sets {
			if s == nil {
				continue
			}
			st, err := window.NewStore(rdb, window.StoreConfig{
				Prefix: base + "-" + names[i], MaxLog: 1, Slack: replayKeep,
			})
			if err != nil {
				return nil, fmt.Errorf("backtest: %w", err)
			}
			ap, err := live.NewApplier(st, live.ApplierConfig{MaxSubjects: cfg.MaxSubjects, Dedup: cfg.Dedup, KeepRecords: replayKeep, WriteBack: true})
			if err != nil {
				return nil, fmt.Errorf("backtest: %w", err)
			}
			out[k].stores = append(out[k].stores, ruleSet{name: names[i], rules: s, store: ap})
		}
	}
	return out, nil
}

// runKafka replays every partition's span, Parallel at a time, and merges
// what they found.
func runKafka(ctx context.Context, client *kafka.Client, cfg *Config, backends []backend, spans []span, rep *Report) ([]*tallies, error) {
	parts := make([]*partition, len(spans))
	rejects := make([]map[string]int64, len(spans))
	for i, sp := range spans {
		st := &partStats{start: sp.Start, end: sp.End}
		st.next.Store(sp.Start)
		parts[i] = newPartition(sp.Partition, cfg.Topic, backends[i%len(backends)], cfg, st)
		rejects[i] = map[string]int64{}
	}
	stop := startProgress(cfg, parts, "kafka")
	err := forEach(ctx, cfg.Parallel, len(spans), func(ctx context.Context, i int) error {
		return replayKafka(ctx, client, cfg, spans[i], parts[i], rejects[i])
	})
	stop()
	if err != nil {
		return nil, err
	}
	rep.Partitions = len(spans)
	rep.Rejected = map[string]int64{}
	for i, sp := range spans {
		rep.Messages += sp.End - sp.Start
		rep.Events += parts[i].stats.events.Load()
		for r, n := range rejects[i] {
			rep.Rejected[r] += n
		}
	}
	return mergeTallies(parts), nil
}

// runHistory replays the minute buckets of [need, cfg.To).
func runHistory(ctx context.Context, cfg *Config, backends []backend, sets []*rules.Set, need time.Time, rep *Report) ([]*tallies, error) {
	q := history.NewQuerier(cfg.History)
	if err := checkMinutes(ctx, q, need); err != nil {
		return nil, err
	}
	parts := make([]*partition, cfg.Parallel)
	for i := range parts {
		parts[i] = newPartition(i, "history", backends[i%len(backends)], cfg, &partStats{})
	}
	stop := startProgress(cfg, parts, "history")
	rows, err := replayHistory(ctx, cfg, q, sets, selection(sets...), need, parts)
	stop()
	if err != nil {
		return nil, err
	}
	rep.Partitions, rep.Messages, rep.Events = len(parts), rows, rows
	return mergeTallies(parts), nil
}

// mergeTallies merges each rules set's tallies over the partitions.
func mergeTallies(parts []*partition) []*tallies {
	out := make([]*tallies, len(parts[0].sets))
	for i := range out {
		out[i] = parts[0].sets[i].tallies
		for _, p := range parts[1:] {
			out[i].merge(p.sets[i].tallies)
		}
	}
	return out
}

// cleanScratch deletes the replay's keys from a scratch Redis (a private
// server goes whole).
func cleanScratch(cfg *Config, backends []backend) {
	if cfg.Scratch == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range backends[0].stores {
		if err := deleteKeys(ctx, cfg.Scratch, s.store.Keys().Pattern()); err != nil {
			cfg.Logger.Warn("backtest: delete the replay's keys from the scratch redis", "pattern", s.store.Keys().Pattern(), "err", err)
		}
	}
}

func deleteKeys(ctx context.Context, rdb *redis.Client, pattern string) error {
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 500 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return rdb.Unlink(ctx, batch...).Err()
	}
	return nil
}

// forEach runs fn for 0..n-1, at most parallel at once; the first error
// cancels the rest and is returned.
func forEach(ctx context.Context, parallel, n int, fn func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i := range n {
		g.Go(func() error { return fn(gctx, i) })
	}
	return g.Wait()
}
