package takeroute

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// peerRules: a strict 5/m on each e-mail and IP of action reset.
const peerRules = `
rules:
  - name: reset
    action: reset
    kinds: [email, ip]
    limits: [5/1m]
    strict: true
`

// planner plans forwarded takes from peerRules, as the aggregator does
// from its rules in force.
func planner(t *testing.T) Planner {
	t.Helper()
	set, err := rules.Parse([]byte(peerRules))
	if err != nil {
		t.Fatal(err)
	}
	return func(sub window.Subject, values map[string]string) (window.EvalQuery, error) {
		return decide.TakeQuery(set, sub, values)
	}
}

// recorder answers every take, noting what it was asked: the peer
// endpoint's own taker.
type recorder struct {
	n    int
	qs   []window.EvalQuery
	take int64
}

func (l *recorder) TakeQueued(_ context.Context, _ time.Time, qs []window.EvalQuery, n int64, events []window.QueuedEvent) (bool, []bool, []window.EvalState, error) {
	l.n, l.qs, l.take = l.n+1, qs, n
	return true, make([]bool, len(events)), make([]window.EvalState, len(qs)), nil
}

func (l *recorder) Reserve(_ context.Context, _ time.Time, qs []window.EvalQuery, n int64, events []window.QueuedEvent) (string, []bool, []window.EvalState, error) {
	l.n, l.qs, l.take = l.n+1, qs, n
	return "r1", make([]bool, len(events)), make([]window.EvalState, len(qs)), nil
}

func (l *recorder) Commit(context.Context, string) error { l.n++; return nil }

func (l *recorder) Release(string) error { l.n++; return nil }

// peerTake is a take a member's limiter forwards for subject: its query
// as the rules plan it, n, and its event at now.
func peerTake(t *testing.T, plan Planner, now time.Time, n int64, subs ...window.Subject) wireTake {
	t.Helper()
	in := wireTake{N: n}
	for i, sub := range subs {
		q, err := plan(sub, nil)
		if err != nil {
			t.Fatal(err)
		}
		in.Queries = append(in.Queries, q)
		e := event.Event{V: event.Version, ID: "e" + string(rune('1'+i)), Action: sub.Action, Kind: sub.Kind, Subject: sub.Subject, TS: now, N: n}
		v, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		in.Events = append(in.Events, window.QueuedEvent{Key: []byte(e.Key()), Value: v, ID: e.ID})
	}
	return in
}

// TestPeerEndpointRefusesForgedTakes forges each field of a forwarded take
// in turn: the credential, the limits and everything else planned from the
// rules, n, the subjects and the events. Each is refused with its status
// and reason before anything is taken; the take as a member sends it is
// taken with the queries this member's own rules give.
func TestPeerEndpointRefusesForgedTakes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0).UTC()
	plan := planner(t)
	l := &recorder{}
	r := &Router{cfg: Config{Local: l, Plan: plan, Token: "peer-s3cret", Now: func() time.Time { return now }}, refused: newRefused()}
	h := r.Handler()
	email := window.Subject{Action: "reset", Kind: "email", Subject: "a@example.com"}
	ip := window.Subject{Action: "reset", Kind: "ip", Subject: "198.51.100.7"}
	valid := func() wireTake { return peerTake(t, plan, now, 1, email) }
	reencode := func(in *wireTake, k int, f func(e *event.Event)) {
		e, err := event.Decode(in.Events[k].Value)
		if err != nil {
			t.Fatal(err)
		}
		f(&e)
		if in.Events[k].Value, err = event.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		token string // default the peer credential
		forge func(in *wireTake)
		code  int
		says  string
	}{
		{"no credential", "-", nil, http.StatusUnauthorized, "peer credential"},
		{"wrong credential", "guess", nil, http.StatusUnauthorized, "peer credential"},
		{"the take surfaces' token", "public-token", nil, http.StatusUnauthorized, "peer credential"},
		{"limit 10^9", "", func(in *wireTake) { in.Queries[0].Limits[0].Limit.Count = 1e9 }, http.StatusConflict, "this member's rules give [{5/1m"},
		{"longer window", "", func(in *wireTake) { in.Queries[0].Limits[0].Limit.Window = time.Second }, http.StatusConflict, "rules give"},
		{"limit not blocking", "", func(in *wireTake) { in.Queries[0].Limits[0].Block = false }, http.StatusConflict, "rules give"},
		{"no limits", "", func(in *wireTake) { in.Queries[0].Limits = nil }, http.StatusConflict, "rules give"},
		{"a bucket", "", func(in *wireTake) {
			in.Queries[0].Buckets = []window.EvalBucket{{Rule: "reset", Bucket: rules.Bucket{Rate: rules.Limit{Count: 1e9, Window: time.Second}, Burst: 1e9}}}
		}, http.StatusConflict, "rules give"},
		{"longest window", "", func(in *wireTake) { in.Queries[0].MaxWindow = time.Second }, http.StatusConflict, "rules give"},
		{"not counted", "", func(in *wireTake) { in.Queries[0].Count = false }, http.StatusConflict, "rules give"},
		{"no block rules", "", func(in *wireTake) { in.Queries[0].BlockRules = nil }, http.StatusConflict, "rules give"},
		{"related values no rule counts", "", func(in *wireTake) { in.Queries[0].Values = map[string]string{"ip": "198.51.100.7"} }, http.StatusConflict, "rules give"},
		{"an action without rules", "", func(in *wireTake) {
			in.Queries[0].Subject.Action = "other"
			reencode(in, 0, func(e *event.Event) { e.Action = "other" })
		}, http.StatusConflict, "rules give [], [], 0s, false"},
		{"n zero", "", func(in *wireTake) { in.N = 0 }, http.StatusBadRequest, "n=0: want 1..1000000"},
		{"n negative", "", func(in *wireTake) { in.N = -1 }, http.StatusBadRequest, "n=-1"},
		{"n past event.MaxN", "", func(in *wireTake) { in.N = event.MaxN + 1 }, http.StatusBadRequest, "n=1000001"},
		{"n near 2^63", "", func(in *wireTake) { in.N = math.MaxInt64 - 1 }, http.StatusBadRequest, "want 1..1000000"},
		{"no query", "", func(in *wireTake) { in.Queries = nil }, http.StatusBadRequest, "0 queries"},
		{"too many queries", "", func(in *wireTake) {
			for range maxQueries {
				in.Queries = append(in.Queries, in.Queries[0])
			}
		}, http.StatusBadRequest, "65 queries"},
		{"a subject twice", "", func(in *wireTake) { in.Queries = append(in.Queries, in.Queries[0]) }, http.StatusBadRequest, "named twice"},
		{"bad action", "", func(in *wireTake) { in.Queries[0].Subject.Action = "Reset Now" }, http.StatusBadRequest, "action"},
		{"bad kind", "", func(in *wireTake) { in.Queries[0].Subject.Kind = "e:mail" }, http.StatusBadRequest, "kind"},
		{"empty subject", "", func(in *wireTake) { in.Queries[0].Subject.Subject = "" }, http.StatusBadRequest, "subject is required"},
		{"subject with a NUL", "", func(in *wireTake) { in.Queries[0].Subject.Subject = "a\x00@example.com" }, http.StatusBadRequest, "control character"},
		{"an IPv6 address apart from its /64", "", func(in *wireTake) {
			in.Queries[0].Subject = window.Subject{Action: "reset", Kind: "ip", Subject: "2001:db8::1"}
		}, http.StatusBadRequest, `is taken as "2001:db8::/64"`},
		{"too many related values", "", func(in *wireTake) {
			in.Queries[0].Values = map[string]string{}
			for i := range maxQueries + 1 {
				in.Queries[0].Values["k"+string(rune('a'+i%26))+string(rune('a'+i/26))] = "x"
			}
		}, http.StatusBadRequest, "65 related values"},
		{"a bad related value", "", func(in *wireTake) { in.Queries[0].Values = map[string]string{"ip": "1\n2"} }, http.StatusBadRequest, "related value"},
		{"no event", "", func(in *wireTake) { in.Events = nil }, http.StatusBadRequest, "0 events for 1 counted subjects"},
		{"two events", "", func(in *wireTake) { in.Events = append(in.Events, in.Events[0]) }, http.StatusBadRequest, "2 events for 1"},
		{"an event of another subject", "", func(in *wireTake) {
			in.Events = peerTake(t, plan, now, 1, window.Subject{Action: "reset", Kind: "email", Subject: "b@example.com"}).Events
		}, http.StatusBadRequest, "names no counted subject"},
		{"an event of another action", "", func(in *wireTake) { reencode(in, 0, func(e *event.Event) { e.Action = "login" }) }, http.StatusBadRequest, "login:email:a@example.com, for the take's"},
		{"an event of another subject under the key", "", func(in *wireTake) { reencode(in, 0, func(e *event.Event) { e.Subject = "b@example.com" }) }, http.StatusBadRequest, "for the take's"},
		{"an event counting more than n", "", func(in *wireTake) { reencode(in, 0, func(e *event.Event) { e.N = event.MaxN }) }, http.StatusBadRequest, "n=1000000, the take's n=1"},
		{"an event id apart from its value's", "", func(in *wireTake) { in.Events[0].ID = "other" }, http.StatusBadRequest, `id "other"`},
		{"an event an hour old", "", func(in *wireTake) { reencode(in, 0, func(e *event.Event) { e.TS = now.Add(-time.Hour) }) }, http.StatusBadRequest, "from this member's clock"},
		{"an event a minute ahead", "", func(in *wireTake) { reencode(in, 0, func(e *event.Event) { e.TS = now.Add(time.Minute) }) }, http.StatusBadRequest, "from this member's clock"},
		{"an event not JSON", "", func(in *wireTake) { in.Events[0].Value = []byte("{") }, http.StatusBadRequest, "event 0"},
		{"an event without its version", "", func(in *wireTake) {
			in.Events[0].Value = []byte(`{"id":"e1","action":"reset","kind":"email","subject":"a@example.com","ts":1800000000000}`)
		}, http.StatusBadRequest, "version is required"},
		{"a reservation with limit 10^9", "", func(in *wireTake) { in.Op = "reserve"; in.Queries[0].Limits[0].Limit.Count = 1e9 }, http.StatusConflict, "rules give"},
		{"a reservation of n near 2^63", "", func(in *wireTake) { in.Op = "reserve"; in.N = math.MaxInt64 }, http.StatusBadRequest, "n=9223372036854775807"},
		{"unknown op", "", func(in *wireTake) { in.Op = "drop" }, http.StatusBadRequest, `op "drop"`},
		{"commit without id", "", func(in *wireTake) { *in = wireTake{Op: "commit"} }, http.StatusBadRequest, "commit of id"},
		{"release of a long id", "", func(in *wireTake) { *in = wireTake{Op: "release", ID: strings.Repeat("a", maxIDBytes+1)} }, http.StatusBadRequest, "release of id"},
	} {
		in := valid()
		if c.forge != nil {
			c.forge(&in)
		}
		token := "peer-s3cret"
		switch c.token {
		case "-":
			token = ""
		case "":
		default:
			token = c.token
		}
		rec := post(h, token, marshal(t, in))
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.says) {
			t.Errorf("%s: %d %q, want %d saying %q", c.name, rec.Code, rec.Body.String(), c.code, c.says)
		}
	}
	for _, c := range []struct {
		name, body, says string
	}{
		{"not JSON", `{"queries":`, "bad forwarded take"},
		{"too large", `{"queries":[],"n":1,"pad":"` + strings.Repeat("x", maxBodyBytes) + `"}`, "too large"},
	} {
		if rec := post(h, "peer-s3cret", c.body); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), c.says) {
			t.Errorf("%s: %d %q, want 400 saying %q", c.name, rec.Code, rec.Body.String(), c.says)
		}
	}
	if l.n != 0 {
		t.Fatalf("%d takes run for refused requests", l.n)
	}
	if got := testutil.ToFloat64(r.refused.WithLabelValues(reasonUnauthorized)); got != 3 {
		t.Errorf("%v refused as unauthorized, want 3", got)
	}
	if testutil.ToFloat64(r.refused.WithLabelValues(reasonRulesDiffer)) == 0 || testutil.ToFloat64(r.refused.WithLabelValues(reasonInvalid)) == 0 {
		t.Error("refusals not counted by reason")
	}

	// As a member sends them: a take of two subjects, taken with this
	// member's own queries.
	in := peerTake(t, plan, now.Add(-2*time.Second), 3, email, ip)
	rec := post(h, "peer-s3cret", marshal(t, in))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"taken":true`) || l.n != 1 || l.take != 3 {
		t.Fatalf("a member's take: %d %s (%d run, n=%d)", rec.Code, rec.Body.String(), l.n, l.take)
	}
	for i, sub := range []window.Subject{email, ip} {
		want, _ := plan(sub, nil)
		if !sameQuery(l.qs[i], want) || !slices.Equal(l.qs[i].Limits, []window.EvalLimit{{Limit: rules.Limit{Count: 5, Window: time.Minute}, Block: true}}) {
			t.Errorf("query %d taken as %+v, want %+v", i, l.qs[i], want)
		}
	}
}

func marshal(t *testing.T, in wireTake) string {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// post sends body to h with the token given.
func post(h http.Handler, token, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
