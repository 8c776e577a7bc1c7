// Package window keeps floodgate's live counters in Redis: multi-level
// buckets (seconds, minutes, hours) per subject, from which any sliding
// window of whole seconds up to rules.MaxWindow is summed exactly to the
// second in one round trip; deny records that expire exactly when a subject
// falls back under its limit; and the next offset of every partition,
// written in the same script run as a batch's increments so that a batch
// Kafka delivers twice counts once.
//
// docs/redis.md describes the key layout and the exactness of each window.
//
// The aggregator's live group uses a Sink:
//
//	st, err := window.NewStore(redisClient, window.StoreConfig{Prefix: "fg"})
//	sink, err := window.NewSink(window.SinkConfig{
//		Store: st, Group: "floodgate-live", Rules: watcher.Current, Decisions: decisionsWriter,
//	})
//	g, err := aggregator.NewGroup(aggregator.Config{...GroupID: "floodgate-live"}, sink)
//
// The limiter reads with Check, one round trip for all of a request's
// subjects:
//
//	states, err := st.Check(ctx, time.Now(), []window.Query{{
//		Subject: window.Subject{Action: "login_failed", Kind: "ip", Subject: ip},
//		Windows: []time.Duration{time.Minute},
//	}})
//	if states[0].Deny != nil { // denied until states[0].Deny.Until }
//
// Strict mode's check-and-increment (window/take.go) is a script built from
// LuaLib over the same buckets.
package window
