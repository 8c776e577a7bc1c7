package event_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
)

// A subject that is not valid is decided, counted and published as its
// digest: stable, itself valid, never digested twice, and apart from every
// valid subject that does not have the digest's form.
func TestCanonicalSubject(t *testing.T) {
	long := strings.Repeat("a", 300) + "@example.com"
	for _, s := range []string{long, "victim@example.com\t", "a\nb", "a\x00", "a\x7f", "a\u0085", strings.Repeat("é", 129), "\xff\xfe"} {
		d := event.CanonicalSubject(s)
		if !event.IsDigest(d) || !strings.HasPrefix(d, event.DigestPrefix) || len(d) != 51 {
			t.Errorf("%.20q: digest %q, want %s and 43 base64url characters", s, d, event.DigestPrefix)
		}
		if event.CanonicalSubject(s) != d || event.CanonicalSubject(d) != d {
			t.Errorf("%.20q: digest not stable or digested again", s)
		}
		e := event.Event{ID: "e1", Action: "a", Kind: "email", Subject: d, TS: time.Now()}
		if err := e.Validate(); err != nil {
			t.Errorf("digest %q is not a valid subject: %v", d, err)
		}
	}
	if event.CanonicalSubject(long) == event.CanonicalSubject(long+"x") {
		t.Error("two subjects, one digest")
	}
	for _, s := range []string{"", "203.0.113.7", "zoë@exämple.com", strings.Repeat("x", 256), event.DigestPrefix + "short"} {
		if got := event.CanonicalSubject(s); got != s {
			t.Errorf("valid %q became %q", s, got)
		}
	}
}

// Published with a 300-byte e-mail (or one with a TAB), an event is encoded,
// keyed and decoded under the digest; so is a raw value with the raw key, as
// a producer of its own would write it: counted, not dead-lettered.
func TestOverlongSubjectTravelsAsDigest(t *testing.T) {
	ts := time.UnixMilli(1700000000000).UTC()
	for _, email := range []string{strings.Repeat("x", 300) + "@example.com", "victim@example.com\t"} {
		d := event.CanonicalSubject(email)
		e := event.Event{ID: "e1", Action: "password_reset", Kind: "email", Subject: email, TS: ts, Attrs: map[string]string{"ip": "203.0.113.7"}}
		b, err := event.Encode(e)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if e.Key() != "email:"+d {
			t.Errorf("key %q, want email:%s", e.Key(), d)
		}
		got, err := event.Decode(b)
		if err != nil || got.Subject != d || got.Attrs["ip"] != "203.0.113.7" {
			t.Fatalf("Decode(Encode) = %+v %v, want subject %s", got, err, d)
		}
		if err := event.CheckKey([]byte(e.Key()), got); err != nil {
			t.Error(err)
		}
		// Written by hand, raw subject in the value and in the key.
		raw := `{"v":1,"id":"e1","action":"password_reset","kind":"ip","subject":"203.0.113.7","ts":1700000000000,"attrs":{"email":` + jsonString(email) + `}}`
		got, err = event.Decode([]byte(raw))
		if err != nil || got.Attrs["email"] != d {
			t.Fatalf("attr: %+v %v, want the attr's digest", got, err)
		}
		raw = `{"v":1,"id":"e1","action":"password_reset","kind":"email","subject":` + jsonString(email) + `,"ts":1700000000000}`
		got, err = event.Decode([]byte(raw))
		if err != nil || got.Subject != d {
			t.Fatalf("raw value: %+v %v, want subject %s", got, err, d)
		}
		if err := event.CheckKey([]byte("email:"+email), got); err != nil {
			t.Errorf("raw key: %v", err)
		}
		if err := event.CheckKey([]byte("email:other"), got); err == nil {
			t.Error("another subject's key accepted")
		}
	}
	// The input map is not modified.
	attrs := map[string]string{"email": "a\tb"}
	_ = event.Event{Subject: "s", Attrs: attrs}.Canonical()
	if attrs["email"] != "a\tb" {
		t.Error("Canonical modified the caller's attrs")
	}
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&0xf])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
