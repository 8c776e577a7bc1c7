package decide

import (
	"fmt"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// TakeQuery is the query a Limiter under set sends its Taker for one
// subject of a take: the subject's limits, buckets, longest window, block
// rules and whether it is counted, from set's rules alone. values are the
// take's related values (kind -> subject); only those a distinct limit of
// the subject counts are kept, as a take's own planning keeps them.
//
// The peer endpoint of owner takes (package takeroute) derives a forwarded
// take's queries with it from the owner's rules instead of trusting the
// ones on the wire. It fails when the subject is not as a Limiter sends
// it: not canonical (event.CanonicalSubject, then the kind's IPv6 prefix),
// which would count it apart from the subject it stands for. A subject
// with no rule gets a query without limits.
func TakeQuery(set *rules.Set, sub window.Subject, values map[string]string) (window.EvalQuery, error) {
	if c := set.Subject(sub.Kind, event.CanonicalSubject(sub.Subject)); c != sub.Subject {
		return window.EvalQuery{}, fmt.Errorf("subject %.80q of kind %s is taken as %.80q", sub.Subject, sub.Kind, c)
	}
	plans, _ := planSubjects(set, Request{Action: sub.Action, Subjects: []Subject{{Kind: sub.Kind, Subject: sub.Subject}}})
	if len(plans) == 0 {
		return window.EvalQuery{Subject: sub}, nil
	}
	return evalQuery(sub.Action, set, &plans[0], values), nil
}
