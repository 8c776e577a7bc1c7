// Package history is floodgate's monitoring store: every access event
// counted per (action, subject, kind) and minute in PostgreSQL, downsampled
// along a retention ladder as it ages, with totals per key and SQL functions
// for dashboards.
//
// Sink implements consume.Sink: per batch it sums events in memory and
// writes the buckets, the totals and the partition's next offset in one
// statement with a compare-and-set on the stored offset, so every event
// counts exactly once across crashes, rebalances and Postgres outages.
//
//	pool, _ := pgxpool.New(ctx, "postgres://floodgate@127.0.0.1:15432/floodgate")
//	sink, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: "floodgate-history"})
//	if err != nil { ... }
//	g, err := consume.NewGroup(consume.Config{
//		Brokers: brokers, Topic: "floodgate.events", GroupID: "floodgate-history",
//	}, sink)
//	err = g.Run(ctx)
//
// With SinkConfig.Visitors ({"visit": "ip"}), each bucket and total also
// keeps a sketch of the distinct values of that attr (unique visitors):
// exact up to 256, a HyperLogLog beyond, merged in SQL by the sink, the
// roller and the dashboard functions.
//
// With SinkConfig.Dedup (the aggregator's --dedup), an event whose id was
// counted within the horizon is skipped: the ids live in history_ids,
// recorded in the batch's transaction before its buckets, and the sink
// prunes those past the horizon while it owns partitions (RunPartition).
//
// The ladder ("1m:2d,5m:14d,1h:400d,1d:forever", ParseLadder) is applied by
// package roller. Querier answers count, curve, top, total and their
// unique-visitor counterparts through the same SQL functions Grafana uses. docs/history.md and docs/dashboards.md
// describe the schema and the guarantees.
package history
