// Package aggregator runs floodgate's partitioned consumers: a Kafka consumer
// group whose every assigned partition is read by its own goroutine, decoded,
// validated, cut into batches and handed to a Sink that applies the batch and
// its offsets atomically. Malformed events are dead-lettered with the reason,
// so no partition ever stalls on bad input.
//
// Exactly-once effect comes from the sinks, not from Kafka: each sink stores the
// next offset of a partition in the same atomic write as the batch's effect and
// refuses batches it already holds. On assignment a worker resumes from the
// sink's own offset; the group's committed offset is only a fallback and the
// input to lag monitoring, so it is committed off the apply path, once per
// CommitInterval for all of a member's partitions. Two sinks exist: live counters in Redis (package
// window, rules) and minute buckets in PostgreSQL (package history).
//
//	g, err := aggregator.NewGroup(aggregator.Config{
//		Brokers: []string{"127.0.0.1:19092"},
//		Topic:   "floodgate.events",
//		GroupID: "floodgate-live",
//	}, sink)
//	if err != nil { ... }
//	err = g.Run(ctx) // until ctx is cancelled; finishes the in-flight batch
package aggregator
