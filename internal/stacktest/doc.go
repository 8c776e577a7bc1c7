// Package stacktest connects tests to the local stack that scripts/stack runs
// (Kafka, Redis and PostgreSQL on loopback), with the addresses of
// `scripts/stack env` (FLOODGATE_BROKERS, FLOODGATE_REDIS_ADDR,
// FLOODGATE_POSTGRES_URL) or the stack's defaults.
//
// Every helper follows one rule: when a service does not answer, the test
// fails with the address and "start it with scripts/stack up"; only under
// -short, and when CI is not "true", is it skipped instead. Under CI a
// missing service is always a failure.
//
// Names (topics, Redis key prefixes) are unique to the test, so tests of
// several packages, and several checkouts, can share one stack; what a
// helper creates is deleted when the test ends.
//
// The cluster profile (`scripts/stack up --cluster`: three Kafka brokers, a
// Redis Cluster of 3 primaries + 3 replicas) has helpers of its own:
// ClusterBrokers, ClusterTopic (replication factor 3, min.insync.replicas=2),
// ClusterRedis, ClusterPrefix, and, for fault tests, KillKafkaNode,
// StartKafkaNode, KillRedisNode, StartRedisNode, RedisFailover,
// RedisFailoverOfKey, KillRedisPrimaryAhead (a primary killed while it holds
// acknowledged writes its replica lacks, as asynchronous replication allows)
// and WaitClusterOK. Kills go through scripts/stack and are serialised across
// test processes (the cluster survives one node of each kind down, not
// two); a killed node is restarted when the test ends. Harnesses that are
// not tests (the chaos suite) take the same locks and faults through
// LockFaults, RedisPrimaryOf, FailoverRedis, CutOffRedisReplica,
// WaitRedisHealthy and WaitKafkaReplicated, which return errors.
//
//	rdb := stacktest.ClusterRedis(t)
//	key := "{" + stacktest.ClusterPrefix(t, rdb) + ":p3}:k" // hash tag first
//	stacktest.KillRedisNode(t, 17001)
//	stacktest.WaitClusterOK(t) // a replica took over
//
// The package imports no floodgate package, so the tests of any package,
// internal or external, can use it without an import cycle. Its
// subpackages serve tests and the bench suites alike, so that test code
// never imports bench/: servicetest (the real binary's services),
// childproc (a child process, a free port, a wait for HTTP), promtext
// (a /metrics scrape), kafkatopics (topics created, offsets, read back)
// and pacedload (paced events with an acknowledged tally).
package stacktest
