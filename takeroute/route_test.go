package takeroute

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"floodgate/window"
)

// A forwarded take's answer survives the wire: sums, retry seconds, a ban.
func TestWireStatesRoundTrip(t *testing.T) {
	until := time.Unix(1795771700, 0).UTC()
	ban := &window.Ban{Until: time.UnixMilli(1795775000123).UTC(), Message: "no", Operator: "op", Since: time.UnixMilli(1795771000000).UTC()}
	in := []window.EvalState{{Sums: []int64{3, 7}, Until: []time.Time{{}, until}, Ban: ban}, {Sums: []int64{0}, Until: []time.Time{{}}}}
	w, err := toWire(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := fromWire(w)
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Sums[1] != 7 || !out[0].Until[0].IsZero() || !out[0].Until[1].Equal(until) || *out[0].Ban != *ban || out[1].Ban != nil {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
}

// local answers every take: the peer endpoint's own taker.
type local struct{ n int }

func (l *local) TakeQueued(_ context.Context, _ time.Time, qs []window.EvalQuery, _ int64, events []window.QueuedEvent) (bool, []bool, []window.EvalState, error) {
	l.n++
	return true, make([]bool, len(events)), make([]window.EvalState, len(qs)), nil
}

// The peer endpoint answers members only, and refuses what is unbounded or
// malformed with a 4xx and the reason, before any take.
func TestHandlerRefusesStrangersAndBadTakes(t *testing.T) {
	l := &local{}
	h := (&Router{cfg: Config{Local: l, Token: "s3cret"}}).Handler()
	q := `{"Subject":{"Action":"reset","Kind":"email","Subject":"a@example.com"},"MaxWindow":60000000000,"Limits":[{"Limit":{"Count":5,"Window":60000000000},"Block":true}],"Count":true}`
	many := strings.TrimSuffix(strings.Repeat(q+",", maxQueries+1), ",")
	for _, c := range []struct {
		name, token, body string
		code              int
		says              string
	}{
		{"no token", "", `{"queries":[` + q + `],"n":1}`, http.StatusUnauthorized, "bearer token"},
		{"wrong token", "guess", `{"queries":[` + q + `],"n":1}`, http.StatusUnauthorized, "bearer token"},
		{"not JSON", "s3cret", `{"queries":`, http.StatusBadRequest, "bad forwarded take"},
		{"no query", "s3cret", `{"queries":[],"n":1}`, http.StatusBadRequest, "0 queries"},
		{"too many queries", "s3cret", `{"queries":[` + many + `],"n":1}`, http.StatusBadRequest, "65 queries"},
		{"n zero", "s3cret", `{"queries":[` + q + `],"n":0}`, http.StatusBadRequest, "n=0"},
		{"too large", "s3cret", `{"queries":[` + q + `],"n":1,"pad":"` + strings.Repeat("x", maxBodyBytes) + `"}`, http.StatusBadRequest, "too large"},
	} {
		rec := post(h, c.token, c.body)
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.says) {
			t.Errorf("%s: %d %q, want %d saying %q", c.name, rec.Code, rec.Body.String(), c.code, c.says)
		}
	}
	if l.n != 0 {
		t.Fatalf("%d takes run for refused requests", l.n)
	}
	rec := post(h, "s3cret", `{"queries":[`+q+`],"n":1,"events":[]}`)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"taken":true`) || l.n != 1 {
		t.Errorf("a member's take: %d %s (%d run)", rec.Code, rec.Body.String(), l.n)
	}
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
