package timespan_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/timespan"
)

func TestParseDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"50ms", 50 * time.Millisecond},
		{"90s", 90 * time.Second},
		{"30m", 30 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"2d", 48 * time.Hour},
		{"1w", 7 * 24 * time.Hour},
		{"1w2d3h", (9*24 + 3) * time.Hour},
		{" 14d ", 14 * 24 * time.Hour},
		{"0", 0},
		{"0s", 0},
		// Go's forms, which flags read before.
		{"1.5h", 90 * time.Minute},
		{".5s", 500 * time.Millisecond},
		{"1.5d", 36 * time.Hour},
		{"-1m", -time.Minute},
		{"+1m", time.Minute},
		{"300us", 300 * time.Microsecond},
		{"300µs", 300 * time.Microsecond},
		{"300μs", 300 * time.Microsecond},
		{"7ns", 7},
		{"1h0m0s", time.Hour},
		{"2562047h47m16.854775807s", math.MaxInt64},
		{"-2562047h47m16.854775808s", math.MinInt64},
		{"15250w", 15250 * 7 * 24 * time.Hour},
	} {
		got, err := timespan.ParseDuration(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestParseDurationErrors(t *testing.T) {
	for _, c := range []struct{ in, says string }{
		{"", "empty"},
		{"   ", "empty"},
		{"2", "missing unit"},
		{"2x", `unknown unit "x"`},
		{"2 d", `unknown unit " d"`},
		{"d", "want a number"},
		{"1day", `unknown unit "day"`},
		{"-", "no number"},
		{".s", "a dot without digits"},
		{"1h-5m", "want a number"},
		{"15251w", "over 292 years"},
		{"2562048h", "over 292 years"},
		{"99999999999999999999s", "over 292 years"},
		{"2562047h47m16.854775808s", "over 292 years"},
		{strings.Repeat("1s", 40), "longer than 64 bytes"},
	} {
		_, err := timespan.ParseDuration(c.in)
		var se *timespan.SyntaxError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "e.g. 50ms, 90s, 1h30m, 2d, 1w") {
			t.Errorf("ParseDuration(%q) error %v; want one saying %q with examples", c.in, err, c.says)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{24 * time.Hour, "1d"},
		{14 * 24 * time.Hour, "14d"},
		{6 * time.Hour, "6h"},
		{5 * time.Minute, "5m"},
		{90 * time.Minute, "90m"},
		{90 * time.Second, "90s"},
		{50 * time.Millisecond, "50ms"},
		{1500 * time.Microsecond, "1500µs"},
		{7, "7ns"},
		{-90 * time.Second, "-90s"},
		{math.MaxInt64, "9223372036854775807ns"},
		{math.MinInt64, "-9223372036854775808ns"},
	} {
		if got := timespan.Format(c.in); got != c.want {
			t.Errorf("Format(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 30, 0, 700_000_000, time.UTC)
	sec := now.Truncate(time.Second)
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"now", sec},
		{" now ", sec},
		{"2d", sec.Add(-48 * time.Hour)},
		{"90m", sec.Add(-90 * time.Minute)},
		{"1w", sec.Add(-7 * 24 * time.Hour)},
		{"30s", sec.Add(-30 * time.Second)},
		{"now-36h", sec.Add(-36 * time.Hour)},
		{"now - 1h30m", sec.Add(-90 * time.Minute)},
		{"2026-11-23T08:00:00Z", time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)},
		{"2026-11-23T08:00:00.25Z", time.Date(2026, 11, 23, 8, 0, 0, 250_000_000, time.UTC)},
		{"2026-11-23T09:00:00+01:00", time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)},
		{"2026-11-23 09:00:00+01:00", time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)},
		{"2026-11-23 08:00", time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)},
		{"2026-11-23 08:00:05", time.Date(2026, 11, 23, 8, 0, 5, 0, time.UTC)},
		{"2026-11-23T08:00", time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)},
		{"2026-11-23T08:00:05", time.Date(2026, 11, 23, 8, 0, 5, 0, time.UTC)},
		{"2026-11-23", time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)},
	} {
		got, err := timespan.ParseTime(c.in, now)
		if err != nil || !got.Equal(c.want) || got.Location() != time.UTC {
			t.Errorf("ParseTime(%q) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "yesterday", "-2d", "now-", "now+1h", "now-2x", "2x", "2026-13-01", "2026-11-23 8am", "now--1h", strings.Repeat("9", 70)} {
		got, err := timespan.ParseTime(in, now)
		if err == nil || !strings.Contains(err.Error(), "RFC 3339 (2026-01-02T15:04:05Z)") {
			t.Errorf("ParseTime(%q) = %s, %v; want an error with examples", in, got, err)
		}
	}
}

// FuzzParseDuration: no input panics; whatever parses formats back to the
// same value; and every duration Go reads (the flags' grammar before) is
// read the same.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"50ms", "90s", "1h30m", "2d", "1w", "1.5h", "-1m", "0", ".5s", "300µs",
		"2562047h47m16.854775807s", "-2562047h47m16.854775808s", "1.00000000000000000001h", "15251w", "1x", "now"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := timespan.ParseDuration(s)
		if err == nil {
			back, err := timespan.ParseDuration(timespan.Format(d))
			if err != nil || back != d {
				t.Fatalf("ParseDuration(%q) = %v; Format %q reads back as %v, %v", s, d, timespan.Format(d), back, err)
			}
		}
		if len(s) <= timespan.MaxLen {
			if g, gerr := time.ParseDuration(strings.TrimSpace(s)); gerr == nil && (err != nil || g != d) {
				t.Fatalf("ParseDuration(%q) = %v, %v; time.ParseDuration reads %v", s, d, err, g)
			}
		}
		_, _ = timespan.ParseTime(s, time.Unix(0, 0))
	})
}
