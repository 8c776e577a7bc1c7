// Package backtest answers "had these rules been live over that range,
// whom would they have denied?" It replays the events topic — from the
// offsets Kafka's time index gives for the range's start less a warm-up, up
// to its end — through the live path's own writer (live.Applier in
// write-back, as the aggregator runs it: the same batching, headroom,
// memory and Lua scripts) over a private, throwaway
// redis-server, and reports per rule, limit and subject the denies, their
// first and last times and deny seconds; with a baseline rules set replayed
// beside it, what changes. Nothing is written to the production Redis, no
// consumer group's offset moves. When retention removed the range, it can
// replay PostgreSQL's minute buckets instead, at minute precision.
//
// docs/backtest.md describes the semantics (ticks, clocks, what matches
// live and what can differ) and the costs.
//
//	set, err := rules.Load("candidate.yaml")
//	base, err := rules.Load("rules.yaml")
//	rep, err := backtest.Run(ctx, backtest.Config{
//		Rules: set, Baseline: base,
//		From: time.Now().Add(-48 * time.Hour), To: time.Now(),
//		Brokers: []string{"127.0.0.1:19092"}, Topic: "floodgate.events",
//	})
//	var re *backtest.RetentionError
//	if errors.As(err, &re) { /* the topic no longer holds the range: FromHistory */ }
//	err = backtest.WriteText(os.Stdout, rep, 20)
package backtest
