package event

import (
	"maps"
	"math"
	"sync"
	"sync/atomic"
)

// decodeEncoded reads a value written exactly as Encode writes it — the
// fields in Encode's order, no whitespace, integers, strings without
// escapes — which is every event floodgate's own producers publish, in one
// pass and without reflection. For anything else ok is false and Decode
// reads the value with encoding/json, which also words the errors; on what
// this accepts both give the same result (FuzzDecodeEncodedMatchesJSON).
//
// It exists for speed: encoding/json scans a value twice and decodes it by
// reflection, about 40 % of the live aggregator's CPU; fastjson, tried
// first, still took half of that building its tree of values.
func decodeEncoded(b []byte) (w wire, ok bool) {
	r := scanner{b: b}
	var v, ms int64
	var id, subject []byte
	if !r.lit(`{"v":`) || !r.int(&v) ||
		!r.lit(`,"id":`) || !r.rawTo(&id) ||
		!r.lit(`,"action":`) || !r.name(&w.Action) ||
		!r.lit(`,"kind":`) || !r.name(&w.Kind) ||
		!r.lit(`,"subject":`) || !r.rawTo(&subject) ||
		!r.lit(`,"ts":`) || !r.int(&ms) ||
		!r.lit(`,"n":`) || !r.int(&w.n) {
		return w, false
	}
	w.ID, w.Subject = twoStrings(id, subject)
	if r.lit(`,"attrs":{`) {
		w.Attrs = map[string]string{}
		for first := true; !r.lit(`}`); first = false {
			var k, v string
			if (!first && !r.lit(`,`)) || !r.str(&k) || !r.lit(`:`) || !r.str(&v) {
				return w, false
			}
			w.Attrs[k] = v
		}
	}
	if !r.lit(`}`) || r.i != len(r.b) {
		return w, false
	}
	w.V = vField{set: true, v: v}
	w.TS = tsField{set: true, ms: ms}
	w.nSet = true
	return w, true
}

// twoStrings returns a and b as strings cut from one allocation: the id
// and the subject of every event cost one instead of two.
func twoStrings(a, b []byte) (string, string) {
	var tmp [256]byte
	s := string(append(append(tmp[:0], a...), b...))
	return s[:len(a)], s[len(a):]
}

// scanner reads b from i on.
type scanner struct {
	b []byte
	i int
}

// lit consumes s if b continues with it.
func (r *scanner) lit(s string) bool {
	if len(r.b)-r.i < len(s) || string(r.b[r.i:r.i+len(s)]) != s {
		return false
	}
	r.i += len(s)
	return true
}

// str reads a string without escapes or control characters (encoding/json
// would unescape or refuse them; its path does).
func (r *scanner) str(dst *string) bool {
	b, ok := r.raw()
	if ok {
		*dst = string(b)
	}
	return ok
}

// name reads a string as str does, interned: a topic carries a handful of
// actions and kinds, and a string allocated for each event's two was a
// fifth of the decoder's allocations.
func (r *scanner) name(dst *string) bool {
	b, ok := r.raw()
	if ok {
		*dst = intern(b)
	}
	return ok
}

// rawTo reads a string's bytes (see str) into dst.
func (r *scanner) rawTo(dst *[]byte) bool {
	b, ok := r.raw()
	*dst = b
	return ok
}

// raw reads a string's bytes (see str).
func (r *scanner) raw() ([]byte, bool) {
	if !r.lit(`"`) {
		return nil, false
	}
	for j := r.i; j < len(r.b); j++ {
		switch c := r.b[j]; {
		case c == '"':
			b := r.b[r.i:j]
			r.i = j + 1
			return b, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// maxNames bounds the interned names: a producer inventing names cannot
// grow the table, only fill it (then new names are allocated as before).
// Only valid names are kept (checkName refuses the others later, and an
// event carrying one is dead-lettered), so the table holds at most
// maxNames × MaxNameLen bytes, and malformed events cannot take its slots.
const maxNames = 256

var (
	names   atomic.Pointer[map[string]string] // read without a lock; replaced whole
	namesMu sync.Mutex                        // serialises replacements
)

func intern(b []byte) string {
	if len(b) > MaxNameLen {
		return string(b)
	}
	m := names.Load()
	if m != nil {
		if s, ok := (*m)[string(b)]; ok {
			return s
		}
		if len(*m) >= maxNames {
			return string(b)
		}
	}
	s := string(b)
	if checkName("", s) != nil {
		return s
	}
	namesMu.Lock()
	defer namesMu.Unlock()
	cur := names.Load()
	if cur != nil && len(*cur) >= maxNames {
		return s
	}
	next := map[string]string{s: s}
	if cur != nil {
		maps.Copy(next, *cur)
	}
	names.Store(&next)
	return s
}

// int reads a JSON integer, -?(0|[1-9][0-9]*), into dst as the fields' own
// decoders (strconv.ParseInt) read it, in the same pass that finds its end
// (scanning it, then parsing a copy, was a sixth of the decoder's time);
// false for one that overflows int64 (encoding/json words the error) or
// that a fraction or an exponent makes another number.
func (r *scanner) int(dst *int64) bool {
	j := r.i
	neg := j < len(r.b) && r.b[j] == '-'
	if neg {
		j++
	}
	start := j
	var u uint64
	for ; j < len(r.b) && '0' <= r.b[j] && r.b[j] <= '9'; j++ {
		d := uint64(r.b[j] - '0')
		if u > (math.MaxUint64-d)/10 {
			return false
		}
		u = u*10 + d
	}
	if j == start || (r.b[start] == '0' && j-start > 1) {
		return false
	}
	if j < len(r.b) && (r.b[j] == '.' || r.b[j] == 'e' || r.b[j] == 'E') {
		return false
	}
	switch {
	case neg && u <= 1<<63:
		*dst = -int64(u-1) - 1
	case !neg && u <= math.MaxInt64:
		*dst = int64(u)
	default:
		return false
	}
	r.i = j
	return true
}
