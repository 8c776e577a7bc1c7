// Package loadgen feeds events to a publisher for `floodgate produce`: from
// NDJSON (one event per line, with friendly defaults) or from a synthetic
// generator with a realistic skew, paced at a given rate.
//
// Synthetic subjects follow a Zipf law (math/rand/v2): a few hot subjects
// get most of the events, as attackers do in access logs. Event times are
// "now", or spread uniformly over a past window for backfill demos.
//
//	gen, err := loadgen.NewSynthetic(loadgen.SyntheticConfig{Subjects: 10000, Seed: 42})
//	if err != nil {
//		return err
//	}
//	pump := loadgen.NewPump(loadgen.PumpConfig{Count: 1_000_000, Rate: 50_000}, gen, publisher)
//	err = pump.Run(ctx) // pump.Counts() may be read meanwhile
package loadgen
