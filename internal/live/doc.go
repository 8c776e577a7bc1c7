// Package live is the aggregator's live path: it counts each batch of the
// events topic into Redis and publishes the decisions that follow.
//
// An Applier writes a batch into the slots of a window.Store in one script
// run per partition slot: bucket increments, the partition's next offset
// (so that a batch Kafka delivers twice counts once), deny records,
// decision state and a change entry. A Headroom per partition remembers how
// far each subject stood from its limits and keeps copies of its buckets
// (mirror.go), so that most subjects are counted without being evaluated,
// and those that are, are evaluated in Go. The Applier also prunes the
// states that say nothing any more and moves a recreated topic's offsets
// back. Backtest's replays and recovery's rebuild count through the same
// Applier.
//
// Sink is the consume.Sink of the live consumer group; Relay publishes
// each owned partition's decisions from its change stream to Kafka, and
// TakeRelay its strict takes' events from its take stream to the events
// topic, exactly once. With SinkConfig.Takes, the Sink also answers the
// strict takes of the partitions it owns from its memory (TakeQueued, a
// decide.Taker; ownertake.go):
//
//	st, err := window.NewStore(redisClient, window.StoreConfig{Prefix: "fg", Partitions: parts.Get})
//	ap, err := live.NewApplier(st, live.ApplierConfig{})
//	sink, err := live.NewSink(live.SinkConfig{
//		Applier: ap, Group: "floodgate-live", Rules: watcher.Current, Relay: relay,
//	})
//	g, err := consume.NewGroup(consume.Config{...GroupID: "floodgate-live"}, sink)
//
// docs/redis.md describes the keys and the apply script.
package live
