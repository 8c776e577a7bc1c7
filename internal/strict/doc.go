// Package strict runs the limiter's strict takes: for rules marked strict,
// a take checks and counts in one atomic Redis script over the same bucket
// keys the aggregator writes, so concurrent takes can never both pass the
// last slot (overshoot zero). Concurrent takes of one slot share a script
// run; a take spanning slots reserves in each and refunds on refusal
// (docs/takes.md, "Strict mode").
//
//	taker, err := strict.New(strict.Config{Store: store})
//	taken, states, err := taker.Take(ctx, time.Now(), queries, 1)
package strict
