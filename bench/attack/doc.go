// Package attack is floodgate's hostile-client suite (make attack): each
// scenario runs the real `floodgate limiter` and `floodgate aggregator`
// binaries on the local stack and does what an attacker would — a subject
// the limiter cannot parse beside one that is over its limit, an exact check
// while Redis does not answer, a record that decompresses to megabytes, a
// million invented subjects — then reports what was tried and what held.
// The table goes into docs/faults.md ("Attacks"); a scenario fails when
// anything over a limit got through, a partition stayed stuck, or memory
// passed the documented bound.
//
// Everything a run creates is unique to it (topics floodgate.attack.<id>.*,
// Redis prefix atk<id>) and deleted at the end.
//
//	rows, err := attack.Run(ctx, attack.Config{Bin: "bin/floodgate", Repo: ".", ...})
package attack
