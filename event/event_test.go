package event_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
)

const goodJSON = `{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":1700000000123,"n":2}`

func goodEvent() event.Event {
	return event.Event{
		V: 1, ID: "e1", Action: "login_failed", Kind: "ip", Subject: "203.0.113.7",
		TS: time.UnixMilli(1700000000123).UTC(), N: 2,
	}
}

// reasonOf returns the Reason of err, which must be an *event.Error.
func reasonOf(tb testing.TB, err error) (reason, field string) {
	tb.Helper()
	if err == nil {
		return "", ""
	}
	var ee *event.Error
	if !errors.As(err, &ee) {
		tb.Fatalf("error %v (%T) is not an *event.Error", err, err)
	}
	if ee.Reason == "" || !strings.Contains(err.Error(), ee.Reason) {
		tb.Fatalf("error %q: empty reason or missing from message", err)
	}
	return ee.Reason, ee.Field
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		reason string
		field  string
	}{
		{"empty", ``, event.ReasonInvalidJSON, ""},
		{"garbage", `not json`, event.ReasonInvalidJSON, ""},
		{"truncated", `{"v":1,"id":"e1"`, event.ReasonInvalidJSON, ""},
		{"trailing data", goodJSON + `{}`, event.ReasonInvalidJSON, ""},
		{"array", `[1,2]`, event.ReasonInvalidJSON, ""},
		{"string", `"hello"`, event.ReasonInvalidJSON, ""},
		{"null", `null`, event.ReasonMissingField, "v"},
		{"invalid utf8", "{\"v\":1,\"id\":\"e1\",\"action\":\"a\",\"kind\":\"ip\",\"subject\":\"\xff\xfe\",\"ts\":1700000000000}", event.ReasonInvalidJSON, ""},
		{"too large", `{"v":1,"pad":"` + strings.Repeat("x", event.MaxSize) + `"}`, event.ReasonTooLarge, ""},
		{"v absent", `{"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonMissingField, "v"},
		{"v 2", `{"v":2,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonUnsupportedVersion, "v"},
		{"v 0", `{"v":0,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonUnsupportedVersion, "v"},
		{"v 2 with other types", `{"v":2,"id":7,"ts":{}}`, event.ReasonUnsupportedVersion, "v"},
		{"v string", `{"v":"1","id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonInvalidField, "v"},
		{"v float", `{"v":1.5,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonInvalidField, "v"},
		{"attrs not an object", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"attrs":[1]}`, event.ReasonInvalidField, "attrs"},
		{"attrs value not a string", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"attrs":{"email":5}}`, event.ReasonInvalidField, "attrs"},
		{"attrs bad key", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"attrs":{"E-mail":"x"}}`, event.ReasonInvalidField, "attrs"},
		{"attrs empty value", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"attrs":{"email":""}}`, event.ReasonMissingField, "attrs.email"},
		{"attrs too many", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"attrs":{"a":"1","b":"1","c":"1","d":"1","e":"1","f":"1","g":"1","h":"1","i":"1"}}`, event.ReasonInvalidField, "attrs"},
		{"id absent", `{"v":1,"action":"a","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonMissingField, "id"},
		{"id empty", `{"v":1,"id":"","action":"a","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonMissingField, "id"},
		{"id number", `{"v":1,"id":12,"action":"a","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonInvalidField, "id"},
		{"id space", `{"v":1,"id":"e 1","action":"a","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonInvalidField, "id"},
		{"id non-ascii", `{"v":1,"id":"é","action":"a","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonInvalidField, "id"},
		{"id too long", `{"v":1,"id":"` + strings.Repeat("a", 65) + `","action":"a","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonInvalidField, "id"},
		{"action absent", `{"v":1,"id":"e1","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonMissingField, "action"},
		{"action upper", `{"v":1,"id":"e1","action":"Login","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonInvalidField, "action"},
		{"action space", `{"v":1,"id":"e1","action":"log in","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonInvalidField, "action"},
		{"action too long", `{"v":1,"id":"e1","action":"` + strings.Repeat("a", 65) + `","kind":"ip","subject":"s","ts":1700000000000}`, event.ReasonInvalidField, "action"},
		{"kind absent", `{"v":1,"id":"e1","action":"a","subject":"s","ts":1700000000000}`, event.ReasonMissingField, "kind"},
		{"kind colon", `{"v":1,"id":"e1","action":"a","kind":"ip:v4","subject":"s","ts":1700000000000}`, event.ReasonInvalidField, "kind"},
		{"kind null", `{"v":1,"id":"e1","action":"a","kind":null,"subject":"s","ts":1700000000000}`, event.ReasonMissingField, "kind"},
		{"subject absent", `{"v":1,"id":"e1","action":"a","kind":"ip","ts":1700000000000}`, event.ReasonMissingField, "subject"},
		{"subject number", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":5,"ts":1700000000000}`, event.ReasonInvalidField, "subject"},
		{"ts absent", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s"}`, event.ReasonMissingField, "ts"},
		{"ts zero", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":0}`, event.ReasonMissingField, "ts"},
		{"ts null", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":null}`, event.ReasonMissingField, "ts"},
		{"ts empty string", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":""}`, event.ReasonMissingField, "ts"},
		{"ts seconds", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000}`, event.ReasonOutOfRange, "ts"},
		{"ts negative", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":-5}`, event.ReasonOutOfRange, "ts"},
		{"ts 1999", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":"1999-12-31T23:59:59.999Z"}`, event.ReasonOutOfRange, "ts"},
		{"ts epoch string", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":"1970-01-01T00:00:00Z"}`, event.ReasonOutOfRange, "ts"},
		{"ts 2200", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":"2200-01-01T00:00:00Z"}`, event.ReasonOutOfRange, "ts"},
		{"ts float", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000.5}`, event.ReasonInvalidField, "ts"},
		{"ts exponent", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1.7e12}`, event.ReasonInvalidField, "ts"},
		{"ts overflow", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":99999999999999999999}`, event.ReasonInvalidField, "ts"},
		{"ts bool", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":true}`, event.ReasonInvalidField, "ts"},
		{"ts not rfc3339", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":"2024-01-02 03:04:05"}`, event.ReasonInvalidField, "ts"},
		{"ts no zone", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":"2024-01-02T03:04:05"}`, event.ReasonInvalidField, "ts"},
		{"n zero", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":0}`, event.ReasonOutOfRange, "n"},
		{"n negative", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":-1}`, event.ReasonOutOfRange, "n"},
		{"n too big", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":1000001}`, event.ReasonOutOfRange, "n"},
		{"n float", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":1.5}`, event.ReasonInvalidField, "n"},
		{"n string", `{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":"1"}`, event.ReasonInvalidField, "n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := event.Decode([]byte(tt.in))
			if err == nil {
				t.Fatalf("Decode accepted %q as %+v", tt.in, e)
			}
			reason, field := reasonOf(t, err)
			if reason != tt.reason || field != tt.field {
				t.Errorf("Decode: reason=%q field=%q (%v), want reason=%q field=%q", reason, field, err, tt.reason, tt.field)
			}
		})
	}
}

func TestDecodeAccepts(t *testing.T) {
	base := goodEvent()
	tests := []struct {
		name string
		in   string
		want event.Event
	}{
		{"full", goodJSON, base},
		{"n absent defaults to 1", `{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":1700000000123}`,
			func() event.Event { e := base; e.N = 1; return e }()},
		{"n null defaults to 1", `{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":1700000000123,"n":null}`,
			func() event.Event { e := base; e.N = 1; return e }()},
		{"ts rfc3339 utc", `{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":"2023-11-14T22:13:20.123Z","n":2}`, base},
		{"ts rfc3339 offset", `{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":"2023-11-15T00:13:20.123+02:00","n":2}`, base},
		{"ts rfc3339 truncated to ms", `{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":"2023-11-14T22:13:20.123999999Z","n":2}`, base},
		{"ts escaped string", `{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":"2023-11-14T22:13:20.123\u005a","n":2}`, base},
		{"unknown fields ignored", `{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":1700000000123,"n":2,"future":{"x":[1,2]},"ua":"curl"}`, base},
		{"field order free", `{"n":2,"ts":1700000000123,"subject":"203.0.113.7","kind":"ip","action":"login_failed","id":"e1","v":1}`, base},
		{"whitespace", " {\n \"v\" : 1 , \"id\":\"e1\",\"action\":\"login_failed\",\"kind\":\"ip\",\"subject\":\"203.0.113.7\",\"ts\":1700000000123,\"n\":2 }\n", base},
		{"ts lower bound", `{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":"2000-01-01T00:00:00Z","n":2}`,
			func() event.Event { e := base; e.TS = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC); return e }()},
		{"unicode subject", `{"v":1,"id":"e1","action":"login_failed","kind":"email","subject":"zoë@exämple.com","ts":1700000000123,"n":2}`,
			func() event.Event { e := base; e.Kind, e.Subject = "email", "zoë@exämple.com"; return e }()},
		{"subject with quotes", `{"v":1,"id":"e\"1","action":"login_failed","kind":"ua","subject":"a \"b\" \\c","ts":1700000000123,"n":2}`,
			func() event.Event { e := base; e.ID, e.Kind, e.Subject = `e"1`, "ua", `a "b" \c`; return e }()},
		{"n max", `{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":1700000000123,"n":1000000}`,
			func() event.Event { e := base; e.N = event.MaxN; return e }()},
		{"attrs", `{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":1700000000123,"n":2,"attrs":{"email":"a@example.com","ua":"curl \"8\""}}`,
			func() event.Event {
				e := base
				e.Attrs = map[string]string{"email": "a@example.com", "ua": `curl "8"`}
				return e
			}()},
		{"attrs empty reads as none", `{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":1700000000123,"n":2,"attrs":{}}`, base},
		{"attrs null", `{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":1700000000123,"n":2,"attrs":null}`, base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := event.Decode([]byte(tt.in))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decode = %+v, want %+v", got, tt.want)
			}
			if got.TS.Location() != time.UTC {
				t.Errorf("TS location = %v, want UTC", got.TS.Location())
			}
		})
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	ts := time.Date(2024, 5, 6, 7, 8, 9, 987_654_321, time.FixedZone("x", 3600))
	tests := []struct {
		name string
		in   event.Event
	}{
		{"defaults", event.Event{ID: event.NewID(), Action: "login_failed", Kind: "ip", Subject: "2001:db8::1", TS: ts}},
		{"full", goodEvent()},
		{"escapes", event.Event{V: 1, ID: `a"b\c`, Action: "x.y-z_0", Kind: "ua", Subject: `Mozilla "5.0" \ <&> ` + "\u2028", TS: ts, N: 7}},
		{"attrs", event.Event{ID: "a1", Action: "visit", Kind: "link", Subject: "abc", TS: ts, Attrs: map[string]string{"ip": "198.51.100.4", "user": `u"1`}}},
		{"max lengths", event.Event{ID: strings.Repeat("~", 64), Action: strings.Repeat("a", 64), Kind: strings.Repeat("k", 64), Subject: strings.Repeat(`"`, 256), TS: ts, N: event.MaxN}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := event.Encode(tt.in)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			got, err := event.Decode(b)
			if err != nil {
				t.Fatalf("Decode(%s): %v", b, err)
			}
			want := tt.in
			want.V = event.Version
			if want.N == 0 {
				want.N = 1
			}
			want.TS = time.UnixMilli(tt.in.TS.UnixMilli()).UTC()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("round trip = %+v, want %+v", got, want)
			}
		})
	}
}

func TestEncodeFormat(t *testing.T) {
	b, err := event.Encode(goodEvent())
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != goodJSON {
		t.Errorf("Encode = %s\nwant     %s", b, goodJSON)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*event.Event)
		reason string
	}{
		{"ok", func(*event.Event) {}, ""},
		{"zero v and n", func(e *event.Event) { e.V, e.N = 0, 0 }, ""},
		{"v 2", func(e *event.Event) { e.V = 2 }, event.ReasonUnsupportedVersion},
		{"no id", func(e *event.Event) { e.ID = "" }, event.ReasonMissingField},
		{"no ts", func(e *event.Event) { e.TS = time.Time{} }, event.ReasonMissingField},
		{"ts 1970", func(e *event.Event) { e.TS = time.Unix(0, 0) }, event.ReasonOutOfRange},
		{"n negative", func(e *event.Event) { e.N = -3 }, event.ReasonOutOfRange},
		{"kind upper", func(e *event.Event) { e.Kind = "IP" }, event.ReasonInvalidField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := goodEvent()
			tt.mutate(&e)
			err := e.Validate()
			if reason, _ := reasonOf(t, err); reason != tt.reason {
				t.Errorf("Validate = %v, want reason %q", err, tt.reason)
			}
			if _, encErr := event.Encode(e); (encErr == nil) != (tt.reason == "") {
				t.Errorf("Encode error = %v, want error: %v", encErr, tt.reason != "")
			}
		})
	}
}

func TestTSBounds(t *testing.T) {
	if got := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(); got != event.MinTSMillis {
		t.Errorf("MinTSMillis = %d, want %d", event.MinTSMillis, got)
	}
	if got := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(); got != event.MaxTSMillis {
		t.Errorf("MaxTSMillis = %d, want %d", event.MaxTSMillis, got)
	}
}

func TestCheckKey(t *testing.T) {
	e := goodEvent()
	tests := []struct {
		name string
		key  []byte
		ok   bool
	}{
		{"match", []byte("ip:203.0.113.7"), true},
		{"nil", nil, false},
		{"empty", []byte{}, false},
		{"other subject", []byte("ip:203.0.113.8"), false},
		{"other kind", []byte("email:203.0.113.7"), false},
		{"no separator", []byte("ip203.0.113.7"), false},
		{"prefix only", []byte("ip:203.0.113"), false},
		{"longer", []byte("ip:203.0.113.77"), false},
		{"wrong separator", []byte("ip|203.0.113.7"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := event.CheckKey(tt.key, e)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckKey(%q) = %v, want ok=%v", tt.key, err, tt.ok)
			}
			if reason, field := reasonOf(t, err); err != nil && (reason != event.ReasonKeyMismatch || field != "key") {
				t.Errorf("CheckKey: reason=%q field=%q", reason, field)
			}
		})
	}
}

func TestNewID(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		id := event.NewID()
		if len(id) != 32 {
			t.Fatalf("NewID() = %q, want 32 hex chars", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
		e := goodEvent()
		e.ID = id
		if err := e.Validate(); err != nil {
			t.Fatalf("NewID() %q is not a valid id: %v", id, err)
		}
	}
}

func TestSplit(t *testing.T) {
	ts := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	got := event.Split("login_failed", ts, map[string]string{"ip": "203.0.113.7", "email": "a@example.com", "device": ""})
	if len(got) != 2 {
		t.Fatalf("Split returned %d events, want 2: %+v", len(got), got)
	}
	wantKeys := []string{"email:a@example.com", "ip:203.0.113.7"}
	for i, e := range got {
		if e.Key() != wantKeys[i] {
			t.Errorf("event %d key = %q, want %q", i, e.Key(), wantKeys[i])
		}
		if e.Action != "login_failed" || !e.TS.Equal(ts) || e.N != 1 || e.V != event.Version {
			t.Errorf("event %d = %+v", i, e)
		}
		if err := e.Validate(); err != nil {
			t.Errorf("event %d invalid: %v", i, err)
		}
	}
	if got[0].ID == got[1].ID {
		t.Errorf("events share id %q", got[0].ID)
	}
	// Each event relates to the other features of the request.
	if got[0].Attrs["ip"] != "203.0.113.7" || got[1].Attrs["email"] != "a@example.com" || len(got[0].Attrs) != 1 || len(got[1].Attrs) != 1 {
		t.Errorf("attrs %v %v, want the other feature each", got[0].Attrs, got[1].Attrs)
	}
}

func FuzzDecode(f *testing.F) {
	seeds := []string{
		goodJSON,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":"2024-01-02T03:04:05.123456789+05:30"}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":"2024-01-02T03:04:05\u002e5Z","n":3}`,
		`{"v":1,"id":"x","action":"a","kind":"email","subject":"zoë@exämple.com\u2028","ts":946684800000}`,
		`{"v":1,"ID":"x","Action":"a","KIND":"k","subject":"\"\\","ts":7258118399999,"n":1000000,"x":null}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"attrs":{"email":"a@b","ip":"::1"}}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"attrs":{"E":"x"}}`,
		`{"v":2}`, `[]`, `null`, `{"ts":1e3}`, `{"v":1,"ts":"1970-01-01T00:00:00Z"}`,
		`{"v":1,"id":"e1","action":"a","kind":"email","subject":"a\tb","ts":1700000000000,"attrs":{"ip":"` + strings.Repeat("x", 300) + `"}}`,
		`{"v":1,"id":"e1","action":"a","kind":"email","subject":"~sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","ts":1700000000000}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		e, err := event.Decode(value)
		if err != nil {
			var ee *event.Error
			if !errors.As(err, &ee) || ee.Reason == "" {
				t.Fatalf("Decode error %v (%T) is not an *event.Error with a reason", err, err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("Decode accepted an invalid event %+v: %v", e, err)
		}
		b, err := event.Encode(e)
		if err != nil {
			t.Fatalf("Encode(%+v) after Decode(%q): %v", e, value, err)
		}
		again, err := event.Decode(b)
		if err != nil {
			t.Fatalf("Decode(Encode(%+v)) = %v; encoded %s", e, err, b)
		}
		if !reflect.DeepEqual(again, e) {
			t.Fatalf("round trip changed the event:\n got %+v\nwant %+v", again, e)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	value := []byte(goodJSON)
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := event.Decode(value); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRFC3339(b *testing.B) {
	value := []byte(`{"v":1,"id":"0123456789abcdef0123456789abcdef","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":"2023-11-14T22:13:20.123Z","n":2}`)
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := event.Decode(value); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	e := goodEvent()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := event.Encode(e); err != nil {
			b.Fatal(err)
		}
	}
}
