// Package faults is floodgate's fault suite (make chaos): it runs the
// aggregator binary under paced load on the local stack and injects one
// fault at a time — SIGKILL of the aggregator, a malformed burst, a broken
// rules file, PostgreSQL stop/start, a Kafka broker restart, a Redis restart
// — then counts every scenario's events in Kafka (the truth), in Postgres
// and in Redis, subject by subject, and writes the table to docs/faults.md.
// On scripts/stack's --cluster profile, when it answers, the "cluster-..."
// scenarios do the same with two aggregator processes per group: SIGKILL of
// one, a Redis primary failover and kill -9 (also with acknowledged writes
// its replica lacks), kill -9 of a Kafka broker; they take stacktest's fault
// locks, so they never have a node down at the same time as a test.
//
// Everything it creates is unique to the run (topics floodgate.chaos.<id>,
// groups chaos-<id>-live/history, Redis prefix chaos<id>, action
// chaos_<id>) and is deleted at the end, except the Postgres rows of the
// action (history is append-only by design).
//
//	rows, err := faults.Run(ctx, faults.Config{Bin: "bin/floodgate", Repo: ".", ...})
package faults
