// Package feed follows the change streams the live aggregator writes, one
// per Kafka partition, in the partition's Redis slot (docs/redis.md): every
// applied batch that changed a subject's decision state or made a new
// decision appends one entry, in the same script run as the counts, so the
// stream never disagrees with the counters.
//
// Follow reads one partition: a snapshot of the partition's state first (the
// limiter keeps it in memory and answers checks from it), then every entry
// after it; a gap in the entries' sequence numbers (trimmed before they were
// read, or lost with a failed-over Redis primary) brings a new snapshot. The
// decisions relay follows from its own cursor instead and reports gaps.
//
//	err := feed.Follow(ctx, feed.Config{
//		Source: store, Streams: rdb, Partition: 7, Handler: state,
//	})
package feed
