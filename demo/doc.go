// Package demo runs floodgate end to end on the local stack, for people
// meeting it for the first time: it starts the aggregator, the limiter and the
// roller as child processes of the same binary, drives a realistic scenario
// (steady link visits with a few hot links, a crawler caught by a shadow
// rule, and a credential-stuffing burst against failed logins), prints one
// status line a second, shows a denial through the HTTP surface, and ends
// with a report — events produced against events counted, who was denied by
// which rule — and the history dashboard. Every run uses its own topic and
// Redis key prefix, so runs never mix.
//
//	err := demo.Run(ctx, demo.Config{Bin: "bin/floodgate", Brokers: ..., RedisAddr: ...,
//		PostgresURL: ..., Rules: "examples/rules.yaml"})
package demo
