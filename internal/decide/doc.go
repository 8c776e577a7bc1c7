// Package limiter decides whether an action may happen now to some
// subjects and serves that decision over three surfaces: the Connect
// service floodgate.v1.Limiter (gRPC, gRPC-Web, HTTP/JSON), plain HTTP
// (GET /v1/check, POST /v1/take, usable as an nginx auth_request target)
// and Envoy's RateLimitService v3. docs/limiter.md describes the decision,
// strict mode, the failure mode and the surfaces.
//
// The limiter counts nothing itself (the aggregator does), so that a check
// costs no Redis round trip: it is answered from State, the decisions the
// live aggregator last wrote of every subject at half a limit or more,
// which Sync follows on the partitions' change streams. A subject State
// does not hold is under half of every limit. Redis is read, one read-only
// script per slot the subjects fall in, only for an exact check, for
// subjects a State over its cap may have left out, and without a State.
// Take is the exception: a strict rule promises zero overshoot, so its
// subjects are checked and counted in one script per slot (package
// strict) before the events are published for the aggregator (which skips
// what a take counted) and history. When Redis fails, the bans and
// denials in memory still deny before the failure mode answers; a strict
// take fails closed.
//
//	store, _ := window.NewStore(rdb, window.StoreConfig{Prefix: "fg"})
//	state := decide.NewBoundedState(200000)
//	go decide.Sync(ctx, decide.SyncConfig{State: state, Source: store, Streams: rdb, Partitions: partitions})
//	lim, err := decide.New(decide.Config{Store: store, State: state, Partitions: partitions,
//		Rules: watcher.Current, Publisher: pub})
//	if err != nil { ... }
//	d, err := lim.Check(ctx, decide.Request{Action: "login_failed",
//		Subjects: []decide.Subject{{Kind: "ip", Subject: ip}, {Kind: "email", Subject: email}}})
//	if err == nil && !d.Allowed {
//		// d.Denial.Rule, d.Denial.Message, d.RetryAfter()
//	}
//
//	srv, err := decide.NewServer(decide.ServerConfig{Limiter: lim})
//	err = srv.Start() // 127.0.0.1:8080 (Connect + HTTP), 127.0.0.1:8081 (RLS)
//	defer srv.Shutdown(ctx)
package decide
