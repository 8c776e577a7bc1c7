package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Encode validates e and returns its JSON value:
//
//	{"v":1,"id":"...","action":"...","kind":"...","subject":"...","ts":<epoch ms>,"n":<count>}
//
// with "attrs":{"<kind>":"<value>",...} (keys sorted) after "n" when the
// event has attrs. A zero V or N is written as its default (Version, 1). TS is written in
// whole Unix milliseconds. A subject or attr value that is not a valid
// subject is written as its digest (CanonicalSubject), as e.Key() keys it.
// Errors are *Error.
func Encode(e Event) ([]byte, error) {
	e = e.Canonical()
	if err := e.Validate(); err != nil {
		return nil, err
	}
	n := e.N
	if n == 0 {
		n = 1
	}
	b := make([]byte, 0, 96+len(e.ID)+len(e.Action)+len(e.Kind)+len(e.Subject))
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, Version, 10)
	b = append(b, `,"id":`...)
	b = appendString(b, e.ID)
	b = append(b, `,"action":`...)
	b = appendString(b, e.Action)
	b = append(b, `,"kind":`...)
	b = appendString(b, e.Kind)
	b = append(b, `,"subject":`...)
	b = appendString(b, e.Subject)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, e.TS.UnixMilli(), 10)
	b = append(b, `,"n":`...)
	b = strconv.AppendInt(b, n, 10)
	if len(e.Attrs) > 0 {
		b = append(b, `,"attrs":{`...)
		for i, k := range sortedKeys(e.Attrs) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, e.Attrs[k])
		}
		b = append(b, '}')
	}
	b = append(b, '}')
	if len(b) > MaxSize {
		return nil, &Error{Reason: ReasonTooLarge, Detail: fmt.Sprintf("encoded event is %d bytes, limit %d", len(b), MaxSize)}
	}
	return b, nil
}

// appendString appends s as a JSON string. Validated fields hold no control
// characters, but escaping them keeps the output valid JSON regardless.
func appendString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// wire is the JSON shape Decode reads. Pointers tell absent from zero where
// the difference matters; unknown fields are ignored.
type wire struct {
	V       vField            `json:"v"`
	ID      string            `json:"id"`
	Action  string            `json:"action"`
	Kind    string            `json:"kind"`
	Subject string            `json:"subject"`
	TS      tsField           `json:"ts"`
	N       *int64            `json:"n"`
	Attrs   map[string]string `json:"attrs"`
	// n is "n" when present (nSet), as both decoders leave it: the
	// pointer encoding/json needs to tell an absent "n" would cost the
	// fast path an allocation per event.
	n    int64
	nSet bool
}

// vField parses "v" so that a bad version is told apart from a bad type
// elsewhere: json.Unmarshal reports only its first type error.
type vField struct {
	set, bad bool
	v        int64
}

func (f *vField) UnmarshalJSON(raw []byte) error {
	*f = vField{}
	if string(raw) == "null" {
		return nil
	}
	v, err := strconv.ParseInt(string(raw), 10, 64)
	f.set, f.bad, f.v = true, err != nil, v
	return nil
}

// tsField parses "ts" in place: an integer of Unix milliseconds or an
// RFC 3339 string. Problems are kept in err (not returned) so that
// json.Unmarshal finishes and Decode can report fields in a fixed order.
type tsField struct {
	set bool
	ms  int64
	err *Error
}

func (f *tsField) UnmarshalJSON(raw []byte) error {
	f.set, f.err = true, nil
	switch {
	case len(raw) == 0 || string(raw) == "null":
		f.set = false
	case raw[0] == '"':
		f.err = f.parseString(raw)
	case raw[0] == '-' || ('0' <= raw[0] && raw[0] <= '9'):
		ms, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			f.err = &Error{Reason: ReasonInvalidField, Field: "ts", Detail: fmt.Sprintf("%s: want integer Unix milliseconds or an RFC 3339 string", truncate(string(raw), 40))}
			return nil
		}
		f.ms = ms
	default:
		f.err = &Error{Reason: ReasonInvalidField, Field: "ts", Detail: "want integer Unix milliseconds or an RFC 3339 string"}
	}
	return nil
}

func (f *tsField) parseString(raw []byte) *Error {
	var s string
	if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 {
		s = string(inner)
	} else if err := json.Unmarshal(raw, &s); err != nil {
		return &Error{Reason: ReasonInvalidField, Field: "ts", Detail: err.Error()}
	}
	if s == "" {
		f.set = false
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return &Error{Reason: ReasonInvalidField, Field: "ts", Detail: fmt.Sprintf("%q is not RFC 3339", truncate(s, 40))}
	}
	f.ms = t.UnixMilli()
	if f.ms == 0 {
		// 1970-01-01T00:00:00Z is out of range, not absent.
		return &Error{Reason: ReasonOutOfRange, Field: "ts", Detail: fmt.Sprintf("%s not in [2000-01-01, 2200-01-01)", s)}
	}
	return nil
}

// Decode parses and validates one message value. It accepts "ts" as integer
// Unix milliseconds or an RFC 3339 string, defaults an absent "n" to 1, and
// ignores unknown fields. A subject or attr value that is not a valid
// subject (too long, control characters) is replaced by its digest
// (CanonicalSubject): the event is counted under it, not refused. The returned Event has V = Version, N >= 1 and TS
// in UTC truncated to the millisecond, so Encode(Decode(v)) decodes to the
// same Event. Errors are *Error.
func Decode(value []byte) (Event, error) {
	if len(value) > MaxSize {
		return Event{}, &Error{Reason: ReasonTooLarge, Detail: fmt.Sprintf("%d bytes, limit %d", len(value), MaxSize)}
	}
	if !utf8.Valid(value) {
		return Event{}, &Error{Reason: ReasonInvalidJSON, Detail: "value is not valid UTF-8"}
	}
	w, ok := decodeEncoded(value)
	if !ok {
		var err error
		if w, err = decodeSlow(value); err != nil {
			return Event{}, err
		}
	}
	return w.event()
}

// decodeSlow reads value with encoding/json: every value decodeEncoded leaves
// to it, and the wording of every error.
func decodeSlow(value []byte) (wire, error) {
	var w wire
	if err := json.Unmarshal(value, &w); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case w.V.set && !w.V.bad && w.V.v != Version:
			// A future version may legitimately change field types.
			return w, &Error{Reason: ReasonUnsupportedVersion, Field: "v", Detail: fmt.Sprintf("version %d, want %d", w.V.v, Version)}
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return w, &Error{Reason: ReasonInvalidField, Field: typeErr.Field, Detail: fmt.Sprintf("JSON %s, want %s", typeErr.Value, typeErr.Type)}
		case errors.As(err, &typeErr):
			return w, &Error{Reason: ReasonInvalidJSON, Detail: fmt.Sprintf("value is a JSON %s, want an object", typeErr.Value)}
		default:
			return w, &Error{Reason: ReasonInvalidJSON, Detail: err.Error()}
		}
	}
	if w.N != nil {
		w.n, w.nSet = *w.N, true
	}
	return w, nil
}

// event validates what was read and returns the Event.
func (w wire) event() (Event, error) {
	switch {
	case !w.V.set:
		return Event{}, &Error{Reason: ReasonMissingField, Field: "v", Detail: fmt.Sprintf("version is required (%d)", Version)}
	case w.V.bad:
		return Event{}, &Error{Reason: ReasonInvalidField, Field: "v", Detail: fmt.Sprintf("want the integer %d", Version)}
	case w.V.v != Version:
		return Event{}, &Error{Reason: ReasonUnsupportedVersion, Field: "v", Detail: fmt.Sprintf("version %d, want %d", w.V.v, Version)}
	}
	if err := checkID(w.ID); err != nil {
		return Event{}, err
	}
	if err := checkName("action", w.Action); err != nil {
		return Event{}, err
	}
	if err := checkName("kind", w.Kind); err != nil {
		return Event{}, err
	}
	if w.Subject == "" {
		return Event{}, &Error{Reason: ReasonMissingField, Field: "subject", Detail: "subject is required"}
	}
	w.Subject = CanonicalSubject(w.Subject)
	if w.TS.err != nil {
		return Event{}, w.TS.err
	}
	if !w.TS.set || w.TS.ms == 0 {
		return Event{}, &Error{Reason: ReasonMissingField, Field: "ts", Detail: "event time is required (Unix ms or RFC 3339)"}
	}
	if err := checkTSMillis(w.TS.ms); err != nil {
		if ee, ok := err.(*Error); ok && w.TS.ms >= MinTSMillis/1000 && w.TS.ms < MaxTSMillis/1000 {
			ee.Detail += "; looks like seconds, ts is in milliseconds"
		}
		return Event{}, err
	}
	n := int64(1)
	if w.nSet {
		n = w.n
		if err := checkN(n); err != nil {
			return Event{}, err
		}
	}
	if len(w.Attrs) == 0 {
		w.Attrs = nil // "attrs":{} reads as none
	} else {
		for k, v := range w.Attrs {
			w.Attrs[k] = CanonicalSubject(v) // the map is Decode's own
		}
		if err := checkAttrs(w.Attrs); err != nil {
			return Event{}, err
		}
	}
	return Event{
		V:       Version,
		ID:      w.ID,
		Action:  w.Action,
		Kind:    w.Kind,
		Subject: w.Subject,
		TS:      time.UnixMilli(w.TS.ms).UTC(),
		N:       n,
		Attrs:   w.Attrs,
	}, nil
}
