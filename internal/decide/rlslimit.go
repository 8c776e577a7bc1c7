package decide

import (
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/internal/rules"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// descriptorLimit is the limit an RLS descriptor carries (Envoy's
// descriptor `limit` override, set per route or from dynamic metadata):
// envoyproxy/ratelimit users give each client its own limit this way.
type descriptorLimit struct {
	sub   Subject
	limit rules.Limit
	// bad says why the limit cannot be honoured whatever the rules ("unit":
	// a month or a year, which no sliding window of floodgate has).
	bad string
}

// rlsDescriptorLimit reads a descriptor's limit override, ok false when it
// has none.
func rlsDescriptorLimit(sub Subject, d *commonv3.RateLimitDescriptor) (descriptorLimit, bool) {
	o := d.GetLimit()
	if o == nil {
		return descriptorLimit{}, false
	}
	dl := descriptorLimit{sub: sub, limit: rules.Limit{Count: int64(o.GetRequestsPerUnit())}}
	switch o.GetUnit() {
	case typev3.RateLimitUnit_SECOND:
		dl.limit.Window = time.Second
	case typev3.RateLimitUnit_MINUTE:
		dl.limit.Window = time.Minute
	case typev3.RateLimitUnit_HOUR:
		dl.limit.Window = time.Hour
	case typev3.RateLimitUnit_DAY:
		dl.limit.Window = 24 * time.Hour
	default:
		dl.bad = "unit"
	}
	if dl.limit.Count < 1 {
		dl.bad = "unit"
	}
	return dl, true
}

// applyDescriptorLimits gives each subject's strict limit of a descriptor
// limit's window that limit's count. Only where it is exact: a take whose
// strict limits the Taker counts with the limits it is handed
// (Config.DescriptorLimits). A check answers from counts and deny records
// the aggregator decided by the rules, and a non-strict take is decided
// again by the aggregator when it counts the event: both would promise a
// limit nobody enforces, so the rules' limits answer there, and the
// descriptor is counted as ignored (docs/integrate.md).
func (l *Limiter) applyDescriptorLimits(plans []plan, dls []descriptorLimit, take bool) {
	for _, dl := range dls {
		outcome := "honoured"
		switch {
		case dl.bad != "":
			outcome = "ignored_" + dl.bad
		case !take:
			outcome = "ignored_check"
		case !l.cfg.DescriptorLimits:
			outcome = "ignored_taker"
		default:
			outcome = "ignored_no_window"
			for i := range plans {
				if plans[i].sub != dl.sub {
					continue
				}
				for k := range plans[i].limits {
					pl := &plans[i].limits[k]
					switch {
					case pl.bucket != nil || pl.limit.Window != dl.limit.Window:
					case !pl.rule.Strict:
						if outcome != "honoured" {
							outcome = "ignored_not_strict"
						}
					default:
						pl.limit.Count, pl.descriptor, outcome = dl.limit.Count, true, "honoured"
					}
				}
			}
		}
		l.m.descLimits.WithLabelValues(outcome).Inc()
		if _, seen := l.descWarned.LoadOrStore(outcome, true); !seen && outcome != "honoured" {
			// Once per reason: Envoy sends the same descriptors with every
			// request, and the metric counts them all.
			l.log.Warn("limiter: RLS descriptors carry a limit this limiter cannot honour; the rules' limits answer (docs/integrate.md)",
				"kind", dl.sub.Kind, "limit", dl.limit.String(), "why", strings.TrimPrefix(outcome, "ignored_"))
		}
	}
}
