package rlsload

import (
	"fmt"
	"io"
	"strconv"
	"time"
)

// Load names a run's load: "c=16", or "paced 5000/s".
func (r Result) Load() string {
	if r.Paced() {
		return "paced " + strconv.FormatFloat(r.Rate, 'f', 0, 64) + "/s"
	}
	return "c=" + strconv.Itoa(r.Concurrency)
}

// WriteText prints results as aligned text, one line each.
func WriteText(w io.Writer, rs []Result) {
	fmt.Fprintf(w, "%-14s %10s %10s %10s %10s %10s %10s %8s\n", "load", "ops/s", "p50", "p99", "p99.9", "max", "unexpected", "errors")
	for _, r := range rs {
		fmt.Fprintf(w, "%-14s %10.0f %10s %10s %10s %10s %10d %8d\n", r.Load(), r.PerSec,
			Latency(r.P50), Latency(r.P99), Latency(r.P999), Latency(r.Max), r.Unexpected, r.Errors)
		if r.FirstError != "" {
			fmt.Fprintf(w, "  first error: %s\n", r.FirstError)
		}
	}
}

// Latency formats a latency in µs below a millisecond, else in ms with
// two decimals below 100 ms.
func Latency(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case d < time.Millisecond:
		return strconv.FormatInt(int64(d/time.Microsecond), 10) + " µs"
	case ms < 100:
		return strconv.FormatFloat(ms, 'f', 2, 64) + " ms"
	}
	return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
}
