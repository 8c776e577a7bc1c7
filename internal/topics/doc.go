// Package topics creates floodgate's Kafka topics, idempotently, and says
// which partition a key lands on.
//
// Ensure creates the topics that are missing (a topic that already exists
// is a success, whatever its partition count) and waits until every
// partition of every topic has a leader, so that producing can start at
// once:
//
//	res, err := topics.Ensure(ctx, []string{"127.0.0.1:19092"},
//		topics.Defaults("floodgate.events", "floodgate.events.dlq", "floodgate.decisions")...)
//	for _, r := range res {
//		fmt.Println(r) // floodgate.events: created, 12 partitions
//	}
//
// Partition counts matter for locality only (one subject's events land on
// one partition, so one aggregator owns its counters); correctness does not
// depend on them. Changing the partition count of floodgate.events moves
// subjects between partitions.
//
// Partition(key, n) is where a keyed record lands: the murmur2 partitioner
// of Java's default producer, which the Publisher of package producer uses
// and the live store's slots follow.
package topics
