// Package windowtest holds what the tests of the slot's schema share: the
// exact reference the live path's tests compare against (a sliding log of
// every event, counted as docs/redis.md defines a window, whole seconds),
// and a store of the test's own with batches of consecutive offsets to
// apply to it (store.go).
package windowtest

import "sort"

// Log is the exact reference: every event of a subject with its time in
// milliseconds, a sliding log.
type Log struct{ ms, n []int64 }

// Add records n events at ms.
func (r *Log) Add(ms, n int64) { r.ms = append(r.ms, ms); r.n = append(r.n, n) }

// Prune forgets events before second from: no window can reach them again.
func (r *Log) Prune(from int64) {
	k := 0
	for i, ms := range r.ms {
		if floorDiv(ms, 1000) >= from {
			r.ms[k], r.n[k] = ms, r.n[i]
			k++
		}
	}
	r.ms, r.n = r.ms[:k], r.n[:k]
}

// CountSec counts events whose whole second lies in [e-w+1, e]: the
// definition the store implements (docs/redis.md).
func (r *Log) CountSec(e, w int64) int64 {
	var c int64
	for i, ms := range r.ms {
		if s := floorDiv(ms, 1000); s >= e-w+1 && s <= e {
			c += r.n[i]
		}
	}
	return c
}

// CountMs counts events in (t-w, t] with millisecond times: the ideal
// sliding log.
func (r *Log) CountMs(t, wms int64) int64 {
	var c int64
	for i, ms := range r.ms {
		if ms > t-wms && ms <= t {
			c += r.n[i]
		}
	}
	return c
}

// CountSecRange counts events whose second lies in [a, b].
func (r *Log) CountSecRange(a, b int64) int64 { return r.CountSec(b, b-a+1) }

// Until is the first second t > e at which the window [t-w+1, t] holds at
// most limit events, assuming no events after e.
func (r *Log) Until(e, w, limit int64) int64 {
	type pt struct{ s, n int64 }
	var pts []pt
	for i, ms := range r.ms {
		if s := floorDiv(ms, 1000); s >= e-w+1 && s <= e {
			pts = append(pts, pt{s, r.n[i]})
		}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].s < pts[j].s })
	var total int64
	for _, p := range pts {
		total += p.n
	}
	need, cum := total-limit, int64(0)
	for _, p := range pts {
		cum += p.n
		if cum >= need {
			return p.s + w
		}
	}
	return e + w
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Len is the number of events recorded (and not pruned).
func (r *Log) Len() int { return len(r.ms) }

// FloorDiv divides rounding towards minus infinity (seconds of
// millisecond times before 1970 included).
func FloorDiv(a, b int64) int64 { return floorDiv(a, b) }
