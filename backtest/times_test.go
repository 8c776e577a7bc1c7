package backtest_test

import (
	"testing"
	"time"

	"floodgate/backtest"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 30, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
		err  bool
	}{
		{in: "now", want: now},
		{in: "2d", want: now.Add(-48 * time.Hour)},
		{in: "90m", want: now.Add(-90 * time.Minute)},
		{in: "1w", want: now.Add(-7 * 24 * time.Hour)},
		{in: "2026-11-23T08:00:00Z", want: time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)},
		{in: "2026-11-23T09:00:00+01:00", want: time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)},
		{in: "2026-11-23 08:00", want: time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)},
		{in: "2026-11-23", want: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)},
		{in: "", err: true},
		{in: "yesterday", err: true},
		{in: "-2d", err: true},
		{in: "2x", err: true},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := backtest.ParseTime(c.in, now)
			if c.err {
				if err == nil {
					t.Fatalf("ParseTime(%q) = %s, want an error", c.in, got)
				}
				return
			}
			if err != nil || !got.Equal(c.want) {
				t.Fatalf("ParseTime(%q) = %s, %v; want %s", c.in, got, err, c.want)
			}
		})
	}
}
