package history

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/internal/timespan"
)

// DefaultLadder is the retention ladder used when none is configured: a day
// or two per minute, two weeks per 5 minutes, about a year per hour, and
// days forever.
const DefaultLadder = "1m:2d,5m:14d,1h:400d,1d:forever"

// Steps are the resolutions history can store, finest first. Each has its
// own table, floodgate.bucket_<step>; a ladder uses a subset of them in this
// order.
var steps = []Step{
	{Name: "1m", Width: time.Minute},
	{Name: "5m", Width: 5 * time.Minute},
	{Name: "1h", Width: time.Hour},
	{Name: "1d", Width: 24 * time.Hour},
	{Name: "1w", Width: 7 * 24 * time.Hour},
}

// Step is one storage resolution.
type Step struct {
	Name  string        // "1m", "5m", "1h", "1d" or "1w"
	Width time.Duration // bucket width; buckets are aligned to Origin
}

// Table is the unqualified name of the step's table.
func (s Step) Table() string { return "bucket_" + s.Name }

// Origin aligns every bucket, every roll chunk and the curve steps of the
// dashboard functions: Monday 2000-01-03 00:00 UTC, so that 1w buckets start
// on Mondays and all other widths start on round UTC times.
var Origin = time.Date(2000, 1, 3, 0, 0, 0, 0, time.UTC)

// Bin returns the start of the bucket of width w that holds t (like SQL
// date_bin(w, t, Origin)).
func Bin(t time.Time, w time.Duration) time.Time {
	d := t.Sub(Origin)
	r := d % w
	if r < 0 {
		r += w
	}
	return t.Add(-r).UTC()
}

// Tier is one rung of the ladder: data is kept at Step's resolution until it
// is older than Horizon, then rolled into the next tier. Horizon zero means
// forever (only allowed on the last tier).
type Tier struct {
	Step
	Horizon time.Duration
}

// Forever reports whether the tier keeps its data forever.
func (t Tier) Forever() bool { return t.Horizon == 0 }

// Ladder is the retention configuration, finest tier first.
type Ladder []Tier

// String formats l the way ParseLadder reads it.
func (l Ladder) String() string {
	parts := make([]string, len(l))
	for i, t := range l {
		h := "forever"
		if !t.Forever() {
			h = timespan.Format(t.Horizon)
		}
		parts[i] = t.Name + ":" + h
	}
	return strings.Join(parts, ",")
}

// ParseLadder reads "1m:2d,5m:14d,1h:400d,1d:forever": comma-separated
// step:horizon pairs, finest first. Steps are 1m, 5m, 1h, 1d and 1w, each
// used at most once, in increasing order. Horizons are durations (timespan)
// of whole minutes, strictly increasing, and only the last may be "forever".
// The first tier must be 1m (the sink writes minute buckets).
func ParseLadder(s string) (Ladder, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("ladder: empty; want e.g. " + DefaultLadder)
	}
	var l Ladder
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		name, hor, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("ladder: rung %d %q: want step:horizon, e.g. 5m:14d", i+1, part)
		}
		st, ok := stepByName(strings.TrimSpace(name))
		if !ok {
			return nil, fmt.Errorf("ladder: rung %d %q: unknown step %q (want one of 1m, 5m, 1h, 1d, 1w)", i+1, part, name)
		}
		t := Tier{Step: st}
		hor = strings.TrimSpace(hor)
		if hor != "forever" {
			d, err := timespan.ParseDuration(hor)
			if err == nil {
				err = CheckSpan(d)
			}
			if err != nil {
				return nil, fmt.Errorf("ladder: rung %d %q: horizon: %w", i+1, part, err)
			}
			t.Horizon = d
		}
		l = append(l, t)
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return l, nil
}

// Validate reports the first inconsistency of l.
func (l Ladder) Validate() error {
	if len(l) == 0 {
		return errors.New("ladder: no tiers")
	}
	if l[0].Name != "1m" {
		return fmt.Errorf("ladder: first tier is %s, must be 1m (the sink writes minute buckets)", l[0].Name)
	}
	for i, t := range l {
		if _, ok := stepByName(t.Name); !ok {
			return fmt.Errorf("ladder: tier %d: unknown step %q", i+1, t.Name)
		}
		if t.Horizon < 0 {
			return fmt.Errorf("ladder: tier %s: negative horizon %s", t.Name, t.Horizon)
		}
		if t.Forever() && i != len(l)-1 {
			return fmt.Errorf("ladder: tier %s keeps data forever but is not the last tier (%s follows)", t.Name, l[i+1].Name)
		}
		if i == 0 {
			continue
		}
		prev := l[i-1]
		if t.Width <= prev.Width {
			return fmt.Errorf("ladder: step %s after %s: steps must get coarser", t.Name, prev.Name)
		}
		if t.Width%prev.Width != 0 {
			return fmt.Errorf("ladder: step %s is not a multiple of %s", t.Name, prev.Name)
		}
		if prev.Horizon < t.Width {
			return fmt.Errorf("ladder: tier %s horizon %s is shorter than the next step %s", prev.Name, timespan.Format(prev.Horizon), t.Name)
		}
		if !t.Forever() && t.Horizon < prev.Horizon+t.Width {
			return fmt.Errorf("ladder: tier %s horizon %s must exceed the previous horizon %s by at least one %s bucket",
				t.Name, timespan.Format(t.Horizon), timespan.Format(prev.Horizon), t.Name)
		}
	}
	return nil
}

func stepByName(name string) (Step, bool) {
	for _, s := range steps {
		if s.Name == name {
			return s, true
		}
	}
	return Step{}, false
}

// CheckSpan reports whether d can be a span of history — a ladder horizon,
// a query's range or step: history keeps minutes, so a positive whole
// number of them.
func CheckSpan(d time.Duration) error {
	if d <= 0 || d%time.Minute != 0 {
		return fmt.Errorf("%s: want a positive whole number of minutes, e.g. 90m, 24h, 14d, 2w", timespan.Format(d))
	}
	return nil
}

// LadderFlags carry the retention ladder (docs/history.md) for the
// processes that write or roll history.
type LadderFlags struct {
	Ladder string `name:"ladder" env:"FLOODGATE_LADDER" default:"1m:2d,5m:14d,1h:400d,1d:forever" help:"Retention ladder step:horizon,... finest first (steps 1m 5m 1h 1d 1w; horizons like 2d, 400d or forever)."`
}

// ParsedLadder is the ladder the flag gives.
func (l LadderFlags) ParsedLadder() (Ladder, error) {
	ld, err := ParseLadder(l.Ladder)
	if err != nil {
		return nil, fmt.Errorf("--ladder: %w", err)
	}
	return ld, nil
}
