// Package window is the schema of floodgate's live counters in Redis, and
// their reads: the keys of every partition's slot (multi-level buckets of
// seconds, minutes and hours per subject, deny and shadow records, bans,
// decision state, the change stream, partition offsets), the Lua library
// every script of the slot shares (LuaLib), the wire types written there
// (Deny, Ban, SubjectState, Change, DecisionMessage), and the reads and
// strict takes of the limiter. Any sliding window of whole seconds up to
// rules.MaxWindow is summed exactly to the second in one round trip.
//
// The slot's writers own their code and scripts: package live counts
// batches into it (live.Applier), package operator runs the operators'
// bans, unbans and resets (operator.Writer). What they write is read here:
// Records, bans, change entries.
//
// docs/redis.md describes the key layout and the exactness of each window.
//
// The limiter reads with Check, one round trip for all of a request's
// subjects:
//
//	st, err := window.NewStore(redisClient, window.StoreConfig{Prefix: "fg", Partitions: parts.Get})
//	states, err := st.Check(ctx, time.Now(), []window.Query{{
//		Subject: window.Subject{Action: "login_failed", Kind: "ip", Subject: ip},
//		Windows: []time.Duration{time.Minute},
//	}})
//	if states[0].Deny != nil { // denied until states[0].Deny.Until }
//
// Strict mode's check-and-increment (Store.TakeSlots, read.go) is a script
// built from LuaLib over the same buckets; a take that counts also appends
// its events to the slot's take stream (Keys.Takes) in the same run.
package window
