package backtest

import (
	"fmt"
	"strings"
	"time"

	"floodgate/history"
)

// ParseTime reads a time of the command line: "now"; a span ago, written
// like history's horizons ("90m", "36h", "2d", "1w": that long before now,
// both to the second); or an absolute time, UTC unless it says otherwise:
// RFC 3339 ("2026-11-23T08:00:00Z"), "2026-11-23 08:00[:05]" or a date.
func ParseTime(s string, now time.Time) (time.Time, error) {
	now = now.Truncate(time.Second)
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, fmt.Errorf("empty time: want RFC 3339, 2026-01-02 15:04, a date, now or a span ago (90m, 36h, 2d)")
	}
	if s == "now" {
		return now.UTC(), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02T15:04", time.DateOnly} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t.UTC(), nil
		}
	}
	if d, err := history.ParseDuration(s); err == nil {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2026-01-02T15:04:05Z), 2026-01-02 15:04, a date, now or a span ago (90m, 36h, 2d)", s)
}
