// Package timespan is floodgate's one grammar for durations and times, read
// from flags, rules files, ladders and HTTP headers alike.
//
// A duration is a sequence of terms, each a number and a unit: ns, us (or
// µs), ms, s, m, h, d (24h) and w (7d). People write whole numbers ("50ms",
// "90s", "1h30m", "2d", "1w"); everything Go's time.ParseDuration reads is
// read the same ("1.5h", "-1m", "0"), so no flag value accepted before is
// refused now. Each caller adds its own rule on top (a rules window is whole
// seconds up to 7d, a history horizon whole minutes).
//
// A time is "now", a span ago ("36h", "now-36h": that long before now), or
// an absolute time: RFC 3339 ("2026-01-02T15:04:05Z"), "2026-01-02 15:04",
// "2026-01-02 15:04:05", "2026-01-02T15:04" or a date "2026-01-02"; UTC
// unless the text carries an offset.
//
// Format writes a duration in its largest whole unit ("1d", "6h", "90m",
// "90s", "50ms"), never weeks: the spelling rules windows are stored and
// compared in (window/lua.go writes the same), and ParseDuration reads it
// back to the same value.
//
//	d, err := timespan.ParseDuration("1h30m")   // 90 * time.Minute
//	s := timespan.Format(d)                     // "90m"
//	t, err := timespan.ParseTime("2d", time.Now()) // two days ago, to the second
package timespan
