// Package recovery rebuilds floodgate's live Redis counters from Kafka after
// Redis lost them (a restart without persistence, a failover to an empty
// replica, a FLUSHALL).
//
// The live counters are a function of the last MaxWindow of events, and
// Kafka keeps far more than that, so nothing is really lost: Rebuild finds,
// for every partition whose offset is missing from Redis, the first offset
// at or after now − (longest rule window + slack) with Kafka's time index
// (ListOffsets by timestamp), replays the partition from there to its
// current end through the same live.Applier the live aggregator uses, in
// write-back: counted in memory and written to Redis at checkpoints, each
// storing the partition's checkpoint offset in the same script run as the
// counters. When the live aggregator starts again it resumes exactly where
// the rebuild stopped: nothing is counted twice and nothing is skipped.
// With Force, a partition a write-back aggregator left between a
// checkpoint and its decisions offset is replayed from the checkpoint, so
// what was in that aggregator's memory only is counted too.
//
// Run it while the live aggregator group is stopped (after Redis came back
// empty, before the aggregator restarts): it refuses while the group has
// members. Partitions whose offset Redis still holds are left alone unless
// Force or Reset.
//
// Nothing goes missing silently. Before it writes, Rebuild reads where the
// live group stood on each partition (the offset in Redis, else the group's
// Kafka commit): beyond the log's end means the topic was recreated, below
// its start (with nothing older than the replay's start left) means
// retention deleted events nobody counted. Records deleted while it reads
// are found too. Config.OnLostOffsets decides, as the aggregator's flag of
// the same name: skip reports (ERROR log, Result.Lost, Result.Recreated)
// and replays what the log holds; stop fails, before any write when the
// loss is known at the start.
//
//	res, err := recovery.Rebuild(ctx, recovery.Config{
//		Brokers: brokers, Topic: "floodgate.events", Group: "floodgate-live",
//		Store: store, Applier: applier, Rules: set, // applier: live.ApplierConfig{WriteBack: true}
//	})
//	fmt.Printf("replayed %d events of %d partitions in %s\n", res.Events, res.Partitions, res.Took)
package recovery
