// Package limiter decides whether an action may happen now to some
// subjects, from the live counters and deny records the aggregator keeps in
// Redis (package window), and serves that decision over three surfaces: the
// Connect service floodgate.v1.Limiter (gRPC, gRPC-Web, HTTP/JSON), plain
// HTTP (GET /v1/check, POST /v1/take, usable as an nginx auth_request
// target) and Envoy's RateLimitService v3. docs/limiter.md describes the
// decision, strict mode, the failure mode and the surfaces.
//
//	store, _ := window.NewStore(rdb, window.StoreConfig{Prefix: "fg"})
//	lim, err := limiter.New(limiter.Config{Store: store, Rules: watcher.Current, Publisher: pub})
//	if err != nil { ... }
//	d, err := lim.Check(ctx, limiter.Request{Action: "login_failed",
//		Subjects: []limiter.Subject{{Kind: "ip", Subject: ip}, {Kind: "email", Subject: email}}})
//	if err == nil && !d.Allowed {
//		// d.Denial.Rule, d.Denial.Message, d.RetryAfter()
//	}
//
//	srv, err := limiter.NewServer(limiter.ServerConfig{Limiter: lim})
//	err = srv.Start() // 127.0.0.1:8080 (Connect + HTTP), 127.0.0.1:8081 (RLS)
//	defer srv.Shutdown(ctx)
//
// Each check costs at most one Redis round trip for all its subjects, none
// when a subject's denial is in the in-process deny cache. Take (strict
// rules) checks and counts in one script, so it never admits more than the
// limit.
package limiter
