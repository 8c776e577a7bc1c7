package event

import (
	"bytes"
	"strconv"

	"github.com/valyala/fastjson"
)

// parsers are reused: a fastjson parser keeps its buffers between values.
var parsers fastjson.ParserPool

// decodeFast reads the shape every floodgate producer writes, without
// reflection: an object of the known fields, each once, named exactly, with
// integers, plain strings and an attrs object of strings. For anything else
// — escapes, control characters, keys that encoding/json would match only
// case-insensitively, unknown or repeated fields, nulls, numbers that are
// not plain integers, another type — ok is false and Decode reads the value
// with encoding/json, which also words the errors, so that both paths accept
// the same values with the same result (FuzzDecodeFastMatchesSlow).
//
// It exists for speed: encoding/json scans a value twice and decodes it by
// reflection, about 40 % of the live aggregator's CPU.
func decodeFast(value []byte) (w wire, ok bool) {
	if bytes.IndexByte(value, '\\') >= 0 {
		return w, false
	}
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(value)
	if err != nil {
		return w, false
	}
	obj, err := v.Object()
	if err != nil {
		return w, false
	}
	var seen uint8
	var scratch [24]byte // a number's text: the longest int64 is 20 bytes
	ok = true
	obj.Visit(func(key []byte, v *fastjson.Value) {
		if !ok {
			return
		}
		bit, field := fieldOf(key)
		if bit == 0 || seen&bit != 0 {
			ok = false
			return
		}
		seen |= bit
		ok = w.setFast(field, v, scratch[:0])
	})
	return w, ok
}

// fieldOf numbers the known fields for the repeat check.
func fieldOf(key []byte) (uint8, string) {
	for i, name := range [...]string{"v", "id", "action", "kind", "subject", "ts", "n", "attrs"} {
		if string(key) == name {
			return 1 << i, name
		}
	}
	return 0, ""
}

// setFast sets one field as json.Unmarshal would, or reports false.
func (w *wire) setFast(field string, v *fastjson.Value, scratch []byte) bool {
	switch field {
	case "v":
		raw, ok := plainInt(v, scratch)
		if !ok {
			return false
		}
		return w.V.UnmarshalJSON(raw) == nil
	case "ts":
		var raw []byte
		switch v.Type() {
		case fastjson.TypeNumber:
			r, ok := plainInt(v, scratch)
			if !ok {
				return false
			}
			raw = r
		case fastjson.TypeString:
			s, ok := plainString(v)
			if !ok {
				return false
			}
			raw = append(append(append(scratch, '"'), s...), '"')
		default:
			return false
		}
		return w.TS.UnmarshalJSON(raw) == nil
	case "n":
		raw, ok := plainInt(v, scratch)
		if !ok {
			return false
		}
		// Overflow is a type error in encoding/json: its path words it.
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return false
		}
		w.N = &n
		return true
	case "attrs":
		obj, err := v.Object()
		if err != nil {
			return false
		}
		m := make(map[string]string, obj.Len())
		ok := true
		obj.Visit(func(key []byte, v *fastjson.Value) {
			s, isStr := plainString(v)
			if !ok || !isStr || hasControl(key) {
				ok = false
				return
			}
			m[string(key)] = string(s)
		})
		w.Attrs = m
		return ok
	}
	s, ok := plainString(v)
	if !ok {
		return false
	}
	switch field {
	case "id":
		w.ID = string(s)
	case "action":
		w.Action = string(s)
	case "kind":
		w.Kind = string(s)
	case "subject":
		w.Subject = string(s)
	}
	return true
}

// plainString is a string value without control characters (which
// encoding/json rejects and fastjson lets through).
func plainString(v *fastjson.Value) ([]byte, bool) {
	if v.Type() != fastjson.TypeString {
		return nil, false
	}
	s, err := v.StringBytes()
	if err != nil || hasControl(s) {
		return nil, false
	}
	return s, true
}

func hasControl(s []byte) bool {
	for _, c := range s {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// plainInt is the raw text of a number written as a JSON integer:
// -?(0|[1-9][0-9]*). fastjson accepts looser numbers (a '+', leading zeros,
// inf and nan), which encoding/json rejects.
func plainInt(v *fastjson.Value, scratch []byte) ([]byte, bool) {
	if v.Type() != fastjson.TypeNumber {
		return nil, false
	}
	raw := v.MarshalTo(scratch)
	digits := raw
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || (digits[0] == '0' && len(digits) > 1) {
		return nil, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return nil, false
		}
	}
	return raw, true
}
