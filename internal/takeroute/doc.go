// Package takeroute sends each owner take to the aggregator that owns its
// partitions (stage B's routing; docs/takes.md, "Owner takes"). Every
// aggregator running --owner-takes writes, per partition whose takes it
// answers, an owner record with the address of its peer endpoint
// (window.Keys.TakesOwner, refreshed on its checkpoint tick, expiring when
// it stops); a Router answers a take locally when it can, otherwise
// forwards it, whole, to the one member that owns all its partitions, and
// a take whose partitions several members own (this one among them,
// perhaps) it takes in two phases (split.go): each owner reserves its part,
// then every part is committed, or the reserved ones released.
//
// The peer endpoint trusts nothing a forwarded take carries (peer.go): it
// requires the members' peer credential (Config.Token, never the take
// surfaces' token, which every take client holds), plans each subject's
// limits again from this member's rules (Config.Plan) and takes with
// those, refusing a take whose limits differ (409), and holds n
// (1..event.MaxN), the subjects and the events to the event contract
// (400), before anything is taken.
//
//	plan := func(sub window.Subject, values map[string]string) (window.EvalQuery, error) {
//		return decide.TakeQuery(rulesInForce(), sub, values)
//	}
//	r, err := takeroute.New(takeroute.Config{Local: sink, Redis: rdb, Store: store, Plan: plan, Token: peerToken, Self: "10.0.0.5:8084"})
//	decide.New(decide.Config{Taker: r, ...})
//	http.Handle(takeroute.Path, r.Handler())
package takeroute
