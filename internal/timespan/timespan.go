package timespan

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxLen bounds the text ParseDuration and ParseTime read: the longest
// duration Format writes is 22 bytes and an RFC 3339 time with nanoseconds
// and an offset 35, so a longer input is a mistake or an attack.
const MaxLen = 64

// Examples that error messages offer.
const (
	durationExamples = "e.g. 50ms, 90s, 1h30m, 2d, 1w"
	timeExamples     = "now, a span ago (90m, 36h, 2d, now-1w), RFC 3339 (2026-01-02T15:04:05Z), 2026-01-02 15:04[:05] or a date (2026-01-02)"
)

const (
	day  = 24 * time.Hour
	week = 7 * day
)

// units are the units a term may carry, in nanoseconds.
var units = map[string]uint64{
	"ns": uint64(time.Nanosecond),
	"us": uint64(time.Microsecond),
	"µs": uint64(time.Microsecond), // U+00B5
	"μs": uint64(time.Microsecond), // U+03BC
	"ms": uint64(time.Millisecond),
	"s":  uint64(time.Second),
	"m":  uint64(time.Minute),
	"h":  uint64(time.Hour),
	"d":  uint64(day),
	"w":  uint64(week),
}

// SyntaxError is a text the grammar does not read. A caller with its own
// rule (a rules window) may say Reason with its own examples.
type SyntaxError struct {
	What   string // "duration" or "time"
	Input  string // the text, cut to MaxLen bytes
	Reason string // what is wrong: `unknown unit "x"`
	Want   string // what was expected, with examples
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s %q: %s; want %s", e.What, e.Input, e.Reason, e.Want)
}

func durationError(s, reason string) error {
	if len(s) > MaxLen {
		s = s[:MaxLen] + "…"
	}
	return &SyntaxError{What: "duration", Input: s, Reason: reason, Want: "a number and a unit ms, s, m, h, d or w, " + durationExamples}
}

// ParseDuration reads a duration: an optional sign, then terms of a number
// and a unit, or "0". Surrounding spaces are ignored. A value beyond what
// time.Duration holds (about 292 years) is an error, not a wrap-around.
func ParseDuration(s string) (time.Duration, error) {
	if len(s) > MaxLen {
		return 0, durationError(s, fmt.Sprintf("longer than %d bytes", MaxLen))
	}
	s = strings.TrimSpace(s)
	orig := s
	if s == "" {
		return 0, durationError(orig, "empty")
	}
	neg := false
	if s[0] == '-' || s[0] == '+' {
		neg = s[0] == '-'
		s = s[1:]
	}
	if s == "0" {
		return 0, nil
	}
	if s == "" {
		return 0, durationError(orig, "no number")
	}
	var total uint64
	for s != "" {
		v, n, why := parseTerm(s)
		if why != "" {
			return 0, durationError(orig, why)
		}
		s = s[n:]
		total += v
		if total > limit {
			return 0, durationError(orig, tooLong)
		}
	}
	if neg {
		return -time.Duration(total), nil // total == 1<<63 wraps to the minimum, as wanted
	}
	if total > limit-1 {
		return 0, durationError(orig, tooLong)
	}
	return time.Duration(total), nil
}

// limit is the magnitude of the most negative duration.
const limit = 1 << 63

const tooLong = "too long (over 292 years)"

// parseTerm reads one number and its unit from the start of s ("1.5h" of
// "1.5h30m"): v nanoseconds, at most limit, in its first n bytes; why says
// what is wrong.
func parseTerm(s string) (v uint64, n int, why string) {
	if c := s[0]; c != '.' && !isDigit(c) {
		return 0, 0, fmt.Sprintf("want a number before %q", cut(s))
	}
	whole, i, ok := wholePart(s)
	if !ok {
		return 0, 0, tooLong
	}
	pre := i > 0
	var frac uint64
	scale := 1.0
	post := false
	if i < len(s) && s[i] == '.' {
		var digits int
		frac, scale, digits = fracPart(s[i+1:])
		post = digits > 0
		i += 1 + digits
	}
	if !pre && !post {
		return 0, 0, "a dot without digits"
	}
	j := i
	for ; j < len(s) && s[j] != '.' && !isDigit(s[j]); j++ {
	}
	if j == i {
		return 0, 0, "missing unit after the last number"
	}
	unit, ok := units[s[i:j]]
	if !ok {
		return 0, 0, fmt.Sprintf("unknown unit %q", s[i:j])
	}
	if whole > limit/unit {
		return 0, 0, tooLong
	}
	v = whole * unit
	if frac > 0 {
		v += uint64(float64(frac) * (float64(unit) / scale))
		if v > limit {
			return 0, 0, tooLong
		}
	}
	return v, j, ""
}

// wholePart reads the digits at the start of s: their value and how many
// (ok false: past limit).
func wholePart(s string) (whole uint64, n int, ok bool) {
	for ; n < len(s) && isDigit(s[n]); n++ {
		if whole > limit/10 {
			return 0, 0, false
		}
		whole = whole*10 + uint64(s[n]-'0')
		if whole > limit {
			return 0, 0, false
		}
	}
	return whole, n, true
}

// fracPart reads the digits after a dot, as Go's time.ParseDuration
// does: digits past what fits are dropped. It returns them as a number,
// the power of ten it is to be divided by, and how many digits there were.
func fracPart(s string) (frac uint64, scale float64, n int) {
	scale = 1
	full := false
	for ; n < len(s) && isDigit(s[n]); n++ {
		if full {
			continue
		}
		if frac > (limit-1)/10 {
			full = true
			continue
		}
		y := frac*10 + uint64(s[n]-'0')
		if y > limit {
			full = true
			continue
		}
		frac, scale = y, scale*10
	}
	return frac, scale, n
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// cut shortens s for an error message.
func cut(s string) string {
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return s
}

// formatUnits are the units Format writes, largest first. Weeks are left
// out: people configure 14d rather than 2w.
var formatUnits = []struct {
	suffix string
	d      uint64
}{
	{"d", uint64(day)}, {"h", uint64(time.Hour)}, {"m", uint64(time.Minute)}, {"s", uint64(time.Second)},
	{"ms", uint64(time.Millisecond)}, {"µs", uint64(time.Microsecond)}, {"ns", 1},
}

// Format writes d as a whole number of its largest whole unit: 1d, 6h,
// 90m, 90s, 50ms; 0 is "0s" and a negative duration starts with "-".
// ParseDuration(Format(d)) == d for every d.
func Format(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	sign := ""
	mag := uint64(d)
	if d < 0 {
		sign, mag = "-", -mag // two's complement: right for the minimum too
	}
	for _, u := range formatUnits {
		if mag%u.d == 0 {
			return sign + strconv.FormatUint(mag/u.d, 10) + u.suffix
		}
	}
	return sign + strconv.FormatUint(mag, 10) + "ns" // unreachable: ns divides all
}

// layouts are the absolute times ParseTime reads, in UTC unless the text
// carries an offset. time.Parse also takes a fraction after the seconds.
var layouts = []string{
	time.RFC3339Nano,
	"2006-01-02 15:04:05Z07:00",
	"2006-01-02 15:04:05",
	"2006-01-02 15:04",
	"2006-01-02T15:04:05",
	"2006-01-02T15:04",
	time.DateOnly,
}

func timeError(s, reason string) error {
	if len(s) > MaxLen {
		s = s[:MaxLen] + "…"
	}
	return &SyntaxError{What: "time", Input: s, Reason: reason, Want: timeExamples}
}

// ParseTime reads a time: "now"; a span ago ("36h" or "now-36h"), counted
// from now truncated to the second so that a command's two ends agree; or an
// absolute time (see the package comment), returned in UTC.
func ParseTime(s string, now time.Time) (time.Time, error) {
	if len(s) > MaxLen {
		return time.Time{}, timeError(s, fmt.Sprintf("longer than %d bytes", MaxLen))
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, timeError(s, "empty")
	}
	now = now.Truncate(time.Second).UTC()
	if s == "now" {
		return now, nil
	}
	span, isSpan := strings.CutPrefix(s, "now")
	if isSpan {
		rest, ok := strings.CutPrefix(strings.TrimSpace(span), "-")
		if !ok {
			return time.Time{}, timeError(s, "after now want -span, e.g. now-36h")
		}
		span = rest
	} else if c := s[0]; !isDigit(c) && c != '.' {
		return time.Time{}, timeError(s, "not a time")
	}
	if !isSpan {
		for _, layout := range layouts {
			if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
				return t.UTC(), nil
			}
		}
		span = s
	}
	d, err := ParseDuration(span)
	if err != nil {
		return time.Time{}, timeError(s, "neither an absolute time nor a span ago")
	}
	if d < 0 || strings.HasPrefix(strings.TrimSpace(span), "-") {
		return time.Time{}, timeError(s, "a span ago must not be negative")
	}
	return now.Add(-d), nil
}

// FormatWindow writes a window in its largest whole unit of seconds or
// more: 1d, 6h, 5m, 90s (a fraction of a second is dropped, a window is at
// least one); the spelling of rules, deny records and the RateLimit
// headers.
func FormatWindow(w time.Duration) string {
	if w <= 0 {
		return "0s"
	}
	return Format(w.Truncate(time.Second))
}
