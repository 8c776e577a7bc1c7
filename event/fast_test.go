package event

import (
	"reflect"
	"testing"
	"unicode/utf8"
)

// Whatever the fast path accepts, encoding/json reads the same: the same
// Event, or the same error once validated.
func FuzzDecodeFastMatchesSlow(f *testing.F) {
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
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		if !utf8.Valid(value) {
			return // Decode refuses it before either path
		}
		fast, ok := decodeFast(value)
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
func TestDecodeFastTakesEncodedEvents(t *testing.T) {
	for _, s := range []string{
		`{"v":1,"id":"e1","action":"login_failed","kind":"ip","subject":"203.0.113.7","ts":1700000000123,"n":2}`,
		`{"v":1,"id":"e1","action":"a","kind":"ip","subject":"s","ts":1700000000000,"n":1,"attrs":{"email":"a@b"}}`,
	} {
		if _, ok := decodeFast([]byte(s)); !ok {
			t.Errorf("fast path refused %s", s)
		}
	}
}
