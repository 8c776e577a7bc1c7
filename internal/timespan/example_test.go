package timespan_test

import (
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/internal/timespan"
)

func ExampleParseDuration() {
	for _, s := range []string{"90s", "1h30m", "2d", "1w", "1.5h", "2x"} {
		d, err := timespan.ParseDuration(s)
		fmt.Println(timespan.Format(d), err)
	}
	// Output:
	// 90s <nil>
	// 90m <nil>
	// 2d <nil>
	// 7d <nil>
	// 90m <nil>
	// 0s duration "2x": unknown unit "x"; want a number and a unit ms, s, m, h, d or w, e.g. 50ms, 90s, 1h30m, 2d, 1w
}

func ExampleParseTime() {
	now := time.Date(2026, 11, 25, 12, 30, 0, 0, time.UTC)
	for _, s := range []string{"now", "36h", "now-1w", "2026-11-23 08:00", "2026-11-23T09:00:00+01:00"} {
		t, _ := timespan.ParseTime(s, now)
		fmt.Println(t.Format(time.RFC3339))
	}
	// Output:
	// 2026-11-25T12:30:00Z
	// 2026-11-24T00:30:00Z
	// 2026-11-18T12:30:00Z
	// 2026-11-23T08:00:00Z
	// 2026-11-23T08:00:00Z
}
