package history

import (
	"strings"
	"testing"
	"time"
)

// One answer prints as text or as one JSON document, from the same value.
func TestPrintTextAndJSON(t *testing.T) {
	from := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	to := from.Add(time.Hour)
	count := &CountAnswer{keyDoc: docOf(Key{Action: "visit", Kind: "link", Subject: "a"}), From: from, To: to, Count: 9}
	ever := &TopAnswer{Action: "visit", By: "events", n: 1, events: []Ranked{{Kind: "link", Subject: "a", Value: 9}},
		Subjects: []rankedDoc{{Kind: "link", Subject: "a", Events: 9}}}
	for _, tt := range []struct {
		a          Answer
		text, json string
	}{
		{count, "9\tvisit link:a [2026-12-01T11:00:00Z, 2026-12-01T12:00:00Z)\n",
			`{"action":"visit","kind":"link","subject":"a","from":"2026-12-01T11:00:00Z","to":"2026-12-01T12:00:00Z","count":9}` + "\n"},
		{ever, "top 1 visit, all time\n",
			`{"action":"visit","kind":"","from":null,"to":null,"by":"events","subjects":[{"kind":"link","subject":"a","events":9}]}` + "\n"},
	} {
		var text, js strings.Builder
		if err := Print(&text, tt.a, false); err != nil || !strings.HasPrefix(text.String(), tt.text) {
			t.Errorf("text %q (%v), want it to start with %q", text.String(), err, tt.text)
		}
		if err := Print(&js, tt.a, true); err != nil || js.String() != tt.json {
			t.Errorf("json %q (%v), want %q", js.String(), err, tt.json)
		}
	}
}
