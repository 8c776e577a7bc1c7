// Package limitapi holds what a client of the floodgate limiter needs and
// nothing a server does: the request and decision types, their JSON body
// (/v1/check), the RateLimit header fields, and the conversions to and from
// the floodgate.v1 protobuf messages. limiterclient and limitermw build on it
// without linking Redis, Kafka, Prometheus or a gRPC server; the limiter
// package decides and serves with the same types.
//
//	d := limitapi.Decision{...}        // from limiterclient.Client.Check
//	limitapi.SetHeaders(w.Header(), d) // RateLimit-Policy, RateLimit, Retry-After
//	json.NewEncoder(w).Encode(limitapi.Result(d))
//
// Public: a service that asks a limiter, in Go or through its own HTTP
// stack, uses these types; the limiter itself is internal.
package limitapi
