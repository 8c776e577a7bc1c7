// Package takeroute sends each owner take to the aggregator that owns its
// partitions (stage B's routing; docs/limiter.md, "Owner takes"). Every
// aggregator running --owner-takes writes, per partition whose takes it
// answers, an owner record with the address of its peer endpoint
// (window.Keys.TakesOwner, refreshed on its checkpoint tick, expiring when
// it stops); a Router answers a take locally when it can, otherwise
// forwards it, whole, to the one member that owns all its partitions, and
// a take whose partitions several members own (this one among them,
// perhaps) it takes in two phases (split.go): each owner reserves its part,
// then every part is committed, or the reserved ones released.
//
// The peer endpoint trusts the limits a forwarded take carries (its
// caller's limiter planned them from the same rules): only members may
// reach it, which the aggregator enforces by refusing to listen beyond
// loopback without the takes' bearer token.
//
//	r, err := takeroute.New(takeroute.Config{Local: sink, Redis: rdb, Store: store, Self: "10.0.0.5:8084"})
//	limiter.New(limiter.Config{Taker: r, ...})
//	http.Handle(takeroute.Path, r.Handler())
package takeroute
