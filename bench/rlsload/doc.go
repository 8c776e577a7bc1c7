// Package rlsload measures limiter lookups over Envoy's RateLimitService
// (RLS v3) the way Envoy sends them, for make bench (floodbench): a load
// generator with a closed loop (c callers, each calling again once
// answered) and a paced open loop (a fixed rate whatever the answers, each
// latency counted from the call's scheduled time), latencies in an HDR
// histogram; and Noop, an RLS server that answers OK without work, whose
// throughput is the ceiling of the gRPC stack on the machine.
//
// Nothing in floodgate's serving binary links it.
//
//	cl, err := rlsload.Dial("127.0.0.1:8081", 2)
//	...
//	shape := rlsload.Shape{Domain: "login_failed", Kinds: []string{"ip", "email"}, Subjects: 10_000}
//	res, err := rlsload.Run(ctx, rlsload.Config{Op: cl.Op(shape, rlsload.OK), Concurrency: 16, Duration: 3 * time.Second})
//	fmt.Println(res.PerSec, res.P99)
package rlsload
