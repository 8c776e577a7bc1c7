// Package operator is floodgate's operator controls: inspect a subject
// (its counts in every window, its deny, shadow and ban records, what a
// check answers now and why), ban it for a while whatever its counts, unban
// it (clear its decisions), or reset it (also zero its counters). Each
// write is one script run in the subject's Redis slot (Writer, admin.lua):
// atomic with respect to the aggregator's batches, seen by every limiter
// through the change stream, and published on the decisions topic with the
// operator's name by the relay. docs/operations.md is the runbook.
//
// The same Operator serves `floodgate limiter`'s admin endpoints (Server,
// NewHandler; off unless an admin token is configured) and the CLI
// (`floodgate inspect|ban|unban|reset`):
//
//	writer, err := operator.NewWriter(store)
//	op, err := operator.New(operator.Config{Store: store, Writer: writer, Rules: watcher.Current, Checker: lim,
//		Applied: state.Seq, Group: "floodgate-live", Topic: "floodgate.events"})
//	res, err := op.Unban(ctx, operator.Request{Action: "login_failed",
//		Subjects: []limitapi.Subject{{Kind: "ip", Subject: "203.0.113.7"}}, Operator: "alice"})
package operator
