package event

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"time"
	"unicode"
	"unicode/utf8"
)

// Version is the only version of the wire format this package reads and
// writes (the "v" field).
const Version = 1

// HeaderCounted is the Kafka header set to "1" on messages whose event was
// already counted in Redis by the limiter's strict mode; aggregators must not
// count it in Redis a second time.
const HeaderCounted = "floodgate-counted"

// HeaderTake is the Kafka header of an event a strict take queued in
// Redis and its partition's owner published (live.TakeRelay):
// "<partition>/<take stream entry id>", by which a publish of unknown
// outcome is found again.
const HeaderTake = "floodgate-take"

// Limits of the contract. docs/events.md explains each one.
const (
	// MaxSize is the largest message value Decode accepts, in bytes.
	MaxSize = 4 << 10
	// MaxIDLen is the longest id, in bytes (printable ASCII, no space).
	MaxIDLen = 64
	// MaxNameLen is the longest action or kind, in bytes ([a-z0-9_.-]).
	MaxNameLen = 64
	// MaxSubjectLen is the longest subject, in bytes of UTF-8.
	MaxSubjectLen = 256
	// MaxAttrs is the most related features (attrs) one event may carry.
	MaxAttrs = 8
	// MaxN is the largest count one event may carry.
	MaxN = 1_000_000
	// MinTSMillis is the earliest accepted event time, 2000-01-01T00:00:00Z,
	// in Unix milliseconds (inclusive).
	MinTSMillis int64 = 946_684_800_000
	// MaxTSMillis is the end of the accepted event times,
	// 2200-01-01T00:00:00Z, in Unix milliseconds (exclusive).
	MaxTSMillis int64 = 7_258_118_400_000
)

// Event is one access event: Action happened N times to Subject, a value of
// feature Kind, at TS.
//
// The zero V and zero N stand for their defaults (Version and 1): Validate
// accepts them and Encode writes the defaults. Decode always returns V and N
// set. Event times travel with millisecond precision, so Decode returns TS in
// UTC, truncated to the millisecond.
type Event struct {
	V       int       // wire format version; 0 means Version
	ID      string    // unique event id (NewID), 1..64 printable ASCII bytes
	Action  string    // what happened, e.g. "login_failed"; [a-z0-9_.-]{1,64}
	Kind    string    // feature kind, e.g. "ip", "email"; [a-z0-9_.-]{1,64}
	Subject string    // feature value, e.g. "203.0.113.7"; 1..256 bytes of UTF-8, no control characters, else carried as its digest (CanonicalSubject)
	TS      time.Time // event time, required, in [2000-01-01, 2200-01-01)
	N       int64     // count, 1..MaxN; 0 means 1
	// Attrs are related features of the same access, kind -> value, e.g.
	// {"email": "a@example.com"} on an event of kind "ip": what distinct-count
	// rules and unique-visitor history count. Optional; keys follow the kind
	// rules, values the subject rules, at most MaxAttrs. Readers that ignore
	// them stay correct: the event's own count does not depend on them.
	Attrs map[string]string
}

// Key returns the Kafka message key of e: "<kind>:<subject>", with the
// subject as Encode writes it (CanonicalSubject). Kind cannot contain ':',
// so the key splits unambiguously at its first ':'.
func (e Event) Key() string { return e.Kind + ":" + CanonicalSubject(e.Subject) }

// Validate reports the first limit that e breaks, as an *Error, or nil. It
// holds e as it is: a subject or attr value that is not valid is an error
// here, though Encode (and Decode) write it as its digest; e.Canonical()
// validates where e.Validate() would not for that reason alone.
func (e Event) Validate() error {
	if e.V != 0 && e.V != Version {
		return &Error{Reason: ReasonUnsupportedVersion, Field: "v", Detail: fmt.Sprintf("version %d, want %d", e.V, Version)}
	}
	if err := checkID(e.ID); err != nil {
		return err
	}
	if err := checkName("action", e.Action); err != nil {
		return err
	}
	if err := checkName("kind", e.Kind); err != nil {
		return err
	}
	if err := checkSubject(e.Subject); err != nil {
		return err
	}
	if e.TS.IsZero() {
		return &Error{Reason: ReasonMissingField, Field: "ts", Detail: "event time is required"}
	}
	if err := checkTSMillis(e.TS.UnixMilli()); err != nil {
		return err
	}
	if e.N != 0 {
		if err := checkN(e.N); err != nil {
			return err
		}
	}
	return checkAttrs(e.Attrs)
}

// NewID returns a new unique event id: 128 random bits as 32 lowercase hex
// characters.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (Go 1.24+).
	return hex.EncodeToString(b[:])
}

// Split returns one Event per feature of a single request: features maps a
// kind to its subject, e.g. {"ip": "203.0.113.7", "email": "a@example.com"}.
// Features with an empty subject are skipped. Each event gets its own id,
// N = 1, and the request's other features as its attrs (at most MaxAttrs,
// first by kind), so distinct-count rules see what an IP tried; the events
// are ordered by kind. Split does not validate: Encode (or
// producer.Publisher.Publish) does.
func Split(action string, ts time.Time, features map[string]string) []Event {
	kinds := make([]string, 0, len(features))
	for k, s := range features {
		if s != "" {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	out := make([]Event, 0, len(kinds))
	for _, k := range kinds {
		var attrs map[string]string
		for _, o := range kinds {
			if o != k && len(attrs) < MaxAttrs {
				if attrs == nil {
					attrs = map[string]string{}
				}
				attrs[o] = features[o]
			}
		}
		out = append(out, Event{
			V: Version, ID: NewID(), Action: action, Kind: k, Subject: features[k], TS: ts, N: 1, Attrs: attrs,
		})
	}
	return out
}

// CheckKey reports, as an *Error with Reason ReasonKeyMismatch, whether the
// Kafka message key differs from e.Key(). Decode does not see the key, so
// consumers call CheckKey after it. A key that names the subject as the
// producer had it before its digest ("<kind>:<300-byte e-mail>") agrees
// with the decoded event too: the event is counted, not dead-lettered.
func CheckKey(key []byte, e Event) error {
	if len(key) == 0 {
		return &Error{Reason: ReasonKeyMismatch, Field: "key", Detail: fmt.Sprintf("message has no key, want %q", e.Key())}
	}
	if len(key) > len(e.Kind) && string(key[:len(e.Kind)]) == e.Kind && key[len(e.Kind)] == ':' {
		sub := key[len(e.Kind)+1:]
		if string(sub) == e.Subject || (IsDigest(e.Subject) && CanonicalSubject(string(sub)) == e.Subject) {
			return nil
		}
	}
	return &Error{Reason: ReasonKeyMismatch, Field: "key", Detail: fmt.Sprintf("key %q, value says %q", truncate(string(key), 300), e.Key())}
}

func checkID(id string) error {
	if id == "" {
		return &Error{Reason: ReasonMissingField, Field: "id", Detail: "event id is required"}
	}
	if len(id) > MaxIDLen {
		return &Error{Reason: ReasonInvalidField, Field: "id", Detail: fmt.Sprintf("%d bytes, limit %d", len(id), MaxIDLen)}
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return &Error{Reason: ReasonInvalidField, Field: "id", Detail: fmt.Sprintf("byte %#02x at %d is not printable ASCII", c, i)}
		}
	}
	return nil
}

func checkName(field, s string) error {
	if s == "" {
		return &Error{Reason: ReasonMissingField, Field: field, Detail: field + " is required"}
	}
	if len(s) > MaxNameLen {
		return &Error{Reason: ReasonInvalidField, Field: field, Detail: fmt.Sprintf("%d bytes, limit %d", len(s), MaxNameLen)}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') || c == '_' || c == '.' || c == '-' {
			continue
		}
		return &Error{Reason: ReasonInvalidField, Field: field, Detail: fmt.Sprintf("%q: only [a-z0-9_.-] allowed", truncate(s, 80))}
	}
	return nil
}

func checkSubject(s string) error {
	if s == "" {
		return &Error{Reason: ReasonMissingField, Field: "subject", Detail: "subject is required"}
	}
	if len(s) > MaxSubjectLen {
		return &Error{Reason: ReasonInvalidField, Field: "subject", Detail: fmt.Sprintf("%d bytes, limit %d", len(s), MaxSubjectLen)}
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf { // ASCII fast path
			if c < 0x20 || c == 0x7f {
				return &Error{Reason: ReasonInvalidField, Field: "subject", Detail: fmt.Sprintf("control character %#02x at byte %d", c, i)}
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return &Error{Reason: ReasonInvalidField, Field: "subject", Detail: fmt.Sprintf("invalid UTF-8 at byte %d", i)}
		}
		if unicode.IsControl(r) {
			return &Error{Reason: ReasonInvalidField, Field: "subject", Detail: fmt.Sprintf("control character %U at byte %d", r, i)}
		}
		i += size
	}
	return nil
}

// checkAttrs holds attrs to the kind and subject rules, so that an attr can
// be counted, keyed and stored exactly like a subject.
func checkAttrs(attrs map[string]string) error {
	if len(attrs) > MaxAttrs {
		return &Error{Reason: ReasonInvalidField, Field: "attrs", Detail: fmt.Sprintf("%d attrs, limit %d", len(attrs), MaxAttrs)}
	}
	for _, k := range sortedKeys(attrs) {
		if err := checkName("attrs", k); err != nil {
			e := err.(*Error)
			e.Detail = "key " + e.Detail
			return e
		}
		if err := checkSubject(attrs[k]); err != nil {
			e := err.(*Error)
			e.Field = "attrs." + k
			return e
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func checkTSMillis(ms int64) error {
	if ms < MinTSMillis || ms >= MaxTSMillis {
		return &Error{Reason: ReasonOutOfRange, Field: "ts", Detail: fmt.Sprintf("%d ms (%s) not in [2000-01-01, 2200-01-01)", ms, time.UnixMilli(ms).UTC().Format(time.RFC3339Nano))}
	}
	return nil
}

func checkN(n int64) error {
	if n < 1 || n > MaxN {
		return &Error{Reason: ReasonOutOfRange, Field: "n", Detail: fmt.Sprintf("%d not in [1, %d]", n, MaxN)}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
