package event

import (
	"reflect"
	"testing"
	"time"
	"unicode/utf8"
)

// Whatever the fast path accepts, encoding/json reads the same: the same
// Event, or the same error once validated.
func FuzzDecodeEncodedMatchesJSON(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":1700000000123,"n":2}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":"2024-01-02T03:04:05.123456789+05:30"}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"attrs":{"email":"a@b","ip":"::1"}}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"attrs":{"e":"x","e":"y"}}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"attrs":{}}`,
		` {"v" : 1 , "id":"e1","action":"a","kind":"ip","subject":"zoë","ts":1700000000000,"n":-1} `,
		`{"v":+1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000}`,
		`{"v":01,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":inf}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":nan,"n":1}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1.7e12}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s\t","ts":1700000000000}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"v":2}`,
		`{"v":1,"ID":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":null}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":99999999999999999999}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":"","n":1}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"attrs":{"e":1}}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"x":[1,{"y":nan}]}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000}x`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":-0}`,
		`{"v":"1"}`, `[]`, `null`, `{}`, `{"v":1}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":1}`,
		`{"v":2,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":1}`,
		`{"v":01,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":1}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000.5,"n":1}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":1e2}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":-0}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":9223372036854775808}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":1,"attrs":{}}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":1,"attrs":{"a":"1","a":"2"}}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":1,"attrs":{"a":"1",}}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":1} `,
		`{"v":1,"id":"","action":"a","kind":"ip","subject":"s\u0041","ts":1700000000000,"n":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		if !utf8.Valid(value) {
			return // Decode refuses it before either path
		}
		fast, ok := decodeEncoded(value)
		if !ok {
			return
		}
		slow, err := decodeSlow(value)
		if err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refused it: %v", value, err)
		}
		fe, ferr := fast.event()
		se, serr := slow.event()
		if !reflect.DeepEqual(fe, se) || !reflect.DeepEqual(ferr, serr) {
			t.Fatalf("%q:\nfast %+v, %v\nslow %+v, %v", value, fe, ferr, se, serr)
		}
	})
}

// The fast path takes the values floodgate's producers write: every one of
// them is worth the speed.
func TestDecodeEncodedTakesEncodedEvents(t *testing.T) {
	for _, e := range []Event{
		{V: 1, ID: "e1", Action: "login_failed", Kind: "ip", Subject: "203.0.113.7", TS: time.UnixMilli(1700000000123), N: 2},
		{V: 1, ID: NewID(), Action: "a", Kind: "ip", Subject: "zoë@exämple.com", TS: time.UnixMilli(1700000000000), Attrs: map[string]string{"email": "a@b", "ua": "x"}},
	} {
		b, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := decodeEncoded(b); !ok {
			t.Errorf("fast path refused %s", b)
		}
	}
}
