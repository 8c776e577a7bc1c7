package history

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/floodgate-dev/floodgate/event"
)

// Visitors says, per action, which related feature of an event (a key of its
// Attrs) history counts distinct values of: {"visit": "ip"} keeps, beside
// each visit count, a sketch of the distinct visitor IPs (docs/history.md,
// "Unique visitors"). An event of such an action without that attr counts as
// an event and adds no visitor. Actions not named keep no sketch.
type Visitors map[string]string

// ParseVisitors reads "visit=ip,download=user": comma-separated
// action=attr pairs, each action at most once. Empty means none.
func ParseVisitors(s string) (Visitors, error) {
	v := Visitors{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		action, attr, ok := strings.Cut(part, "=")
		action, attr = strings.TrimSpace(action), strings.TrimSpace(attr)
		if !ok {
			return nil, fmt.Errorf("visitors %q: want action=attr, e.g. visit=ip", part)
		}
		if _, dup := v[action]; dup {
			return nil, fmt.Errorf("visitors %q: action %s named twice (one attr per action)", part, action)
		}
		v[action] = attr
	}
	return v, v.Validate()
}

// Validate checks every action and attr name against the event contract's
// rule for names ([a-z0-9_.-], 1 to 64 bytes): a name no event can carry
// would count nothing, silently.
func (v Visitors) Validate() error {
	for _, action := range slices.Sorted(maps.Keys(v)) {
		probe := event.Event{ID: "x", Action: action, Kind: v[action], Subject: "x", TS: Origin}
		if err := probe.Validate(); err != nil {
			return fmt.Errorf("visitors %s=%s: %w", action, v[action], err)
		}
	}
	return nil
}

// String formats v the way ParseVisitors reads it, actions sorted.
func (v Visitors) String() string {
	parts := make([]string, 0, len(v))
	for a, attr := range v {
		parts = append(parts, a+"="+attr)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// visitorHash returns the 64-bit hash that stands for a counted value in the
// sketches (exact sets store it, the HyperLogLog registers are derived from
// it in SQL, migration 00005) when history has no key. xxhash64: fast and
// well distributed, which HyperLogLog's error bound assumes. As int64,
// PostgreSQL's bigint. Unkeyed, it is no secret: anyone holding a sketch
// finds which IPv4 addresses are in it by hashing them all, so with a
// history key the sketches hold keyed hashes instead (Hasher.visitor).
func visitorHash(value string) int64 { return int64(xxhash.Sum64String(value)) }

// visitorOf returns the value e counts as a visitor, if any, normalized
// as subs says (two spellings of an e-mail are one visitor).
func (v Visitors) visitorOf(e event.Event, subs *subjects) (string, bool) {
	attr, ok := v[e.Action]
	if !ok {
		return "", false
	}
	value, ok := e.Attrs[attr]
	if !ok || value == "" {
		return "", false
	}
	return subs.visitorValue(attr, value), true
}
