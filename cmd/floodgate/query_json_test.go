package main

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
)

// The query commands and migrate status with --json print one JSON
// document, against a database of the test's own on the stack's PostgreSQL.
func TestQueryJSON(t *testing.T) {
	pool := historytest.Pool(t)
	ctx := context.Background()
	sink, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: "test-query-json", Visitors: history.Visitors{"visit": "ref"}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(5 * time.Minute)
	t0 := now.Add(-10 * time.Minute)
	rec := func(off int64, subject, ref string, ts time.Time, n int64) consume.Record {
		return consume.Record{Offset: off, Event: event.Event{V: 1, ID: event.NewID(), Action: "visit", Kind: "link", Subject: subject, TS: ts, N: n, Attrs: map[string]string{"ref": ref}}}
	}
	if err := sink.Apply(ctx, consume.Batch{Topic: "t", Partition: 0, First: 0, Last: 3, Records: []consume.Record{
		rec(0, "a", "r1", t0, 3),
		rec(1, "a", "r2", t0.Add(time.Minute), 2),
		rec(2, "b", "r1", t0, 1),
		rec(3, "a", "r1", t0.Add(2*time.Minute), 4),
	}}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FLOODGATE_POSTGRES_URL", pool.Config().ConnString())
	query := func(args ...string) map[string]any {
		t.Helper()
		code, out, errOut := runCLI(t, append(args, "--json")...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		if strings.Count(out, "\n") != 1 {
			t.Fatalf("%v: want one JSON document on one line, got %q", args, out)
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v: %v: %q", args, err, out)
		}
		return doc
	}
	rng := []string{"--from", t0.Format(time.RFC3339), "--to", now.Format(time.RFC3339)}
	key := map[string]any{"action": "visit", "kind": "link", "subject": "a"}
	want := func(doc map[string]any, fields map[string]any) {
		t.Helper()
		for k, v := range fields {
			if !reflect.DeepEqual(doc[k], v) {
				t.Errorf("%s = %#v, want %#v (doc %v)", k, doc[k], v, doc)
			}
		}
	}
	from, to := t0.Format(time.RFC3339), now.Format(time.RFC3339)

	want(query(append([]string{"query", "count", "-a", "visit", "-k", "link", "-s", "a"}, rng...)...),
		merge(key, map[string]any{"count": 9.0, "from": from, "to": to}))
	want(query("query", "total", "-a", "visit", "-k", "link", "-s", "a"), merge(key, map[string]any{"total": 9.0}))

	curve := query(append([]string{"query", "curve", "-a", "visit", "-k", "link", "-s", "a", "--step", "5m"}, rng...)...)
	want(curve, merge(key, map[string]any{"step_seconds": 300.0, "from": from, "to": to}))
	if pts, _ := curve["points"].([]any); len(pts) != 2 || sumOf(pts, "value") != 9 {
		t.Errorf("curve points %v: want 2 steps summing to 9", curve["points"])
	}

	vis := query(append([]string{"query", "visitors", "-a", "visit", "-k", "link", "-s", "a", "--step", "5m"}, rng...)...)
	want(vis, merge(key, map[string]any{"visitors_in_range": 2.0, "visitors_ever": 2.0, "step_seconds": 300.0}))
	if pts, _ := vis["points"].([]any); len(pts) != 2 || sumOf(pts, "events") != 9 {
		t.Errorf("visitors points %v: want 2 steps, 9 events", vis["points"])
	}

	want(query(append([]string{"query", "top", "-a", "visit"}, rng...)...), map[string]any{
		"action": "visit", "kind": "", "by": "events", "from": from, "to": to,
		"subjects": []any{
			map[string]any{"kind": "link", "subject": "a", "events": 9.0},
			map[string]any{"kind": "link", "subject": "b", "events": 1.0},
		},
	})
	want(query("query", "top", "-a", "visit", "--ever", "--visitors", "-n", "1"), map[string]any{
		"by": "visitors", "from": nil, "to": nil,
		"subjects": []any{map[string]any{"kind": "link", "subject": "a", "events": 9.0, "visitors": 2.0}},
	})
	want(query("query", "top", "-a", "nothing"), map[string]any{"subjects": []any{}})

	// Without --json, the text as before.
	for _, tt := range []struct {
		args []string
		want string
	}{
		{append([]string{"query", "count", "-a", "visit", "-k", "link", "-s", "a"}, rng...), "9\tvisit link:a [" + from},
		{[]string{"query", "total", "-a", "visit", "-k", "link", "-s", "a"}, "9\tvisit link:a, all time\n"},
		{[]string{"query", "top", "-a", "visit", "--ever"}, "top 10 visit, all time\n"},
		{[]string{"migrate", "status"}, "VERSION"},
	} {
		if code, out, errOut := runCLI(t, tt.args...); code != 0 || !strings.HasPrefix(out, tt.want) {
			t.Errorf("%v: exit %d, stdout %q, want it to start with %q; stderr %q", tt.args, code, out, tt.want, errOut)
		}
	}

	st := query("migrate", "status")
	ms, _ := st["migrations"].([]any)
	if len(ms) == 0 {
		t.Fatalf("migrate status: no migrations: %v", st)
	}
	for _, m := range ms {
		m := m.(map[string]any)
		if m["applied"] != true || m["applied_at"] == nil || m["file"] == "" || m["version"] == nil {
			t.Errorf("migration %v: want applied, with its time, file and version", m)
		}
	}
}

func merge(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func sumOf(points []any, field string) float64 {
	var n float64
	for _, p := range points {
		v, _ := p.(map[string]any)[field].(float64)
		n += v
	}
	return n
}
