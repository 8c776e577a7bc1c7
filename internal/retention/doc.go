// Package retention moves history down the retention ladder: buckets older than
// their tier's horizon are aggregated into the next tier and deleted in the
// same transaction, chunk by chunk, raising the tier's watermark with them;
// partitions left empty, and those of a finite last tier wholly past its
// horizon, are dropped. One roller runs at a time (a PostgreSQL advisory
// lock); a run is idempotent and resumable after a crash.
//
//	r, err := retention.New(retention.Config{Pool: pool, Ladder: ladder})
//	if err != nil { ... }
//	rep, err := r.RunOnce(ctx)   // or r.Run(ctx, time.Minute)
//
// docs/history.md describes the ladder and the guarantees.
package retention
