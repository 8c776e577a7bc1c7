// Package aggregator reads floodgate's events topic for every process that
// counts it. A Group is a member of a Kafka consumer group whose every
// assigned partition is read by its own worker: each message is accepted
// or refused (Accept: a valid event, keyed by its subject, not too far
// ahead of the clock), and the run of offsets is cut into batches a Sink
// applies. Refused messages go to the dead-letter topic with their reason
// (a stub of one too large to copy; a stub naming the offsets of a record
// batch that would decompress past MaxBatchDecompressed, skipped unread),
// so that no partition ever stalls on bad input. Memory is bounded whatever
// the producers write: the Fetcher inflates a response's batches one at a
// time and ends a fetch once its records hold Config.ReadAheadBytes, and
// that much again may wait fetched for each partition. `floodgate
// rebuild` (package recovery) and `floodgate backtest` read the topic with
// the same Fetcher and Accept, so a replay counts exactly what the live
// path counted.
//
// Exactly-once effect comes from the sinks, not from Kafka: each sink stores
// the next offset of a partition in the same atomic write as the batch's
// effect and refuses batches it already holds. On assignment a worker
// resumes from the sink's own offset; the group's committed offset is only a
// fallback and the input to lag monitoring, so it is committed off the apply
// path, once per CommitInterval for all of a member's partitions. The
// package knows no sink: the live counters and decisions in Redis (package
// live) and the minute buckets in PostgreSQL (package history) each run a
// Group of their own, so that one store's outage never stalls the other.
//
//	g, err := consume.NewGroup(consume.Config{
//		Brokers: []string{"127.0.0.1:19092"},
//		Topic:   "floodgate.events",
//		GroupID: "floodgate-live",
//	}, sink)
//	if err != nil { ... }
//	err = g.Run(ctx) // until ctx is cancelled; finishes the in-flight batch
package consume
