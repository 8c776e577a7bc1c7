package takeroute

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// What the peer endpoint holds a forwarded take to before it takes
// anything. A member's limiter planned the take from its rules; the owner
// plans it again from its own (Config.Plan) and takes with those. The wire
// may only agree with them: a take whose limits differ is refused (409),
// not corrected, so that nothing is taken on limits the owner's rules do
// not give, and nothing on limits its sender did not decide on either
// (during a rules reload the two members may briefly hold different rules:
// the forwarded takes of the rules that changed are denied closed, with a
// retry, until both hold the same). Its events must be the ones a limiter
// would queue for its counted subjects, as the event contract holds them:
// they are appended to the take stream as this owner's, and counted.

// maxClockSkew is how far a forwarded event's time may be from the owner's
// clock: a take is forwarded within its sender's take timeout, and the
// owner counts the take at its own second.
const maxClockSkew = 30 * time.Second

// Reasons of floodgate_takeroute_peer_refused_total.
const (
	reasonUnauthorized = "unauthorized"
	reasonInvalid      = "invalid"
	reasonRulesDiffer  = "rules_differ"
)

func newRefused() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_takeroute_peer_refused_total",
		Help: "Requests the owner takes' peer endpoint refused before any take, by reason: unauthorized (no or a wrong peer credential), invalid (malformed or out of bounds: n, subjects, events), rules_differ (limits this member's rules do not give: a rules reload under way, or a forgery).",
	}, []string{"reason"})
	for _, r := range []string{reasonUnauthorized, reasonInvalid, reasonRulesDiffer} {
		c.WithLabelValues(r)
	}
	return c
}

// refusal is a request the peer endpoint refuses: its status, metric
// reason and message.
type refusal struct {
	code   int
	reason string
	msg    string
}

func invalid(format string, args ...any) refusal {
	return refusal{http.StatusBadRequest, reasonInvalid, "bad forwarded take: " + fmt.Sprintf(format, args...)}
}

func (r *Router) refuse(w http.ResponseWriter, ref refusal) {
	r.refused.WithLabelValues(ref.reason).Inc()
	r.log().Debug("take router: forwarded request refused", "status", ref.code, "reason", ref.msg)
	http.Error(w, ref.msg, ref.code)
}

// check holds a forwarded request to its bounds and, for a take or a
// reservation, replaces its queries by this member's own (nil: go on).
func (r *Router) check(in *wireTake, now time.Time) *refusal {
	switch in.Op {
	case "commit", "release":
		if in.ID == "" || len(in.ID) > maxIDBytes {
			ref := invalid("%s of id %q: want 1..%d bytes", in.Op, in.ID, maxIDBytes)
			return &ref
		}
		return nil
	case "", "reserve":
	default:
		ref := invalid("op %q: want reserve, commit, release or none", in.Op)
		return &ref
	}
	if len(in.Queries) == 0 || len(in.Queries) > maxQueries {
		ref := invalid("%d queries: want 1..%d", len(in.Queries), maxQueries)
		return &ref
	}
	if in.N < 1 || in.N > event.MaxN {
		ref := invalid("n=%d: want 1..%d", in.N, event.MaxN)
		return &ref
	}
	own, counted, ref := r.ownQueries(in.Queries)
	if ref != nil {
		return ref
	}
	if ref := checkEvents(in, own, counted, now); ref != nil {
		return ref
	}
	in.Queries = own
	return nil
}

// ownQueries plans each query's subject from this member's rules and
// refuses the take unless the wire's query is that plan. counted maps the
// Kafka key of each counted subject to its query.
func (r *Router) ownQueries(qs []window.EvalQuery) ([]window.EvalQuery, map[string]int, *refusal) {
	own := make([]window.EvalQuery, len(qs))
	counted := map[string]int{}
	seen := make(map[window.Subject]bool, len(qs))
	for i, q := range qs {
		if err := checkSubject(q.Subject); err != nil {
			ref := invalid("query %d: %v", i, err)
			return nil, nil, &ref
		}
		if seen[q.Subject] {
			ref := invalid("query %d: %s named twice", i, window.Field(q.Subject))
			return nil, nil, &ref
		}
		seen[q.Subject] = true
		if len(q.Values) > maxQueries {
			ref := invalid("query %d: %d related values, at most %d", i, len(q.Values), maxQueries)
			return nil, nil, &ref
		}
		for kind, v := range q.Values {
			if err := checkSubject(window.Subject{Action: q.Subject.Action, Kind: kind, Subject: v}); err != nil {
				ref := invalid("query %d: related value: %v", i, err)
				return nil, nil, &ref
			}
		}
		o, err := r.cfg.Plan(q.Subject, q.Values)
		if err != nil {
			ref := invalid("query %d: %v", i, err)
			return nil, nil, &ref
		}
		if !sameQuery(q, o) {
			return nil, nil, &refusal{http.StatusConflict, reasonRulesDiffer, fmt.Sprintf(
				"forwarded take refused: query %d (%s) carries limits %v, buckets %v, longest window %s, counted %t; this member's rules give %v, %v, %s, %t (a rules reload under way, or a forgery): nothing taken",
				i, window.Field(q.Subject), q.Limits, q.Buckets, q.MaxWindow, q.Count, o.Limits, o.Buckets, o.MaxWindow, o.Count)}
		}
		own[i] = o
		if o.Count {
			counted[o.Subject.Kind+":"+o.Subject.Subject] = i
		}
	}
	return own, counted, nil
}

// checkSubject holds a subject to the event contract: an action and a
// kind as names, a valid subject as it stands.
func checkSubject(s window.Subject) error {
	e := event.Event{ID: "x", Action: s.Action, Kind: s.Kind, Subject: s.Subject, TS: time.Unix(1_800_000_000, 0)}
	return e.Validate()
}

// sameQuery reports whether a forwarded query is what this member plans.
func sameQuery(wire, own window.EvalQuery) bool {
	return wire.Subject == own.Subject && wire.MaxWindow == own.MaxWindow && wire.Count == own.Count &&
		slices.Equal(wire.Limits, own.Limits) && slices.Equal(wire.Buckets, own.Buckets) &&
		slices.Equal(wire.BlockRules, own.BlockRules) && maps.Equal(wire.Values, own.Values)
}

// checkEvents holds a take's events to its counted subjects: one each,
// keyed by it, of the take's action and subject, counting n, at about the
// owner's time, valid by the event contract.
func checkEvents(in *wireTake, own []window.EvalQuery, counted map[string]int, now time.Time) *refusal {
	if len(in.Events) != len(counted) {
		ref := invalid("%d events for %d counted subjects: want one each", len(in.Events), len(counted))
		return &ref
	}
	given := make([]bool, len(own))
	for k, qe := range in.Events {
		i, ok := counted[string(qe.Key)]
		if !ok || given[i] {
			ref := invalid("event %d: key %.80q names no counted subject of the take without an event", k, qe.Key)
			return &ref
		}
		given[i] = true
		ev, err := event.Decode(qe.Value)
		if err != nil {
			ref := invalid("event %d: %v", k, err)
			return &ref
		}
		sub := own[i].Subject
		switch {
		case ev.Action != sub.Action || ev.Kind != sub.Kind || ev.Subject != sub.Subject:
			ref := invalid("event %d: %s:%s:%.80s, for the take's %s", k, ev.Action, ev.Kind, ev.Subject, window.Field(sub))
			return &ref
		case ev.N != in.N:
			ref := invalid("event %d: n=%d, the take's n=%d", k, ev.N, in.N)
			return &ref
		case qe.ID != "" && qe.ID != ev.ID:
			ref := invalid("event %d: id %.80q, its value's %q", k, qe.ID, ev.ID)
			return &ref
		case ev.TS.Before(now.Add(-maxClockSkew)) || ev.TS.After(now.Add(maxClockSkew)):
			ref := invalid("event %d: time %s is %s from this member's clock, at most %s", k, ev.TS.Format(time.RFC3339Nano), ev.TS.Sub(now).Round(time.Millisecond), maxClockSkew)
			return &ref
		}
	}
	return nil
}
