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
// The package imports no floodgate package, so the tests of any package,
// internal or external, can use it without an import cycle.
package stacktest
