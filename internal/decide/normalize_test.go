package decide_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// strictOnce: one password reset a minute per e-mail and per IP, strict.
const strictOnce = `
rules:
  - name: reset-once
    action: password_reset
    kinds: [email, ip]
    limits: [1/1m]
    strict: true
`

// Issue 51: an attacker who varies an e-mail's case or pads it with white
// space got a fresh counter each time. The spellings of one subject are one
// subject on every surface of the limiter (Go, HTTP, RLS; takes and
// checks), and the takes publish it as counted; a kind may opt out.
func TestSpellingsOfASubjectAreOneSubject(t *testing.T) {
	ctx := context.Background()
	take := func(e *env, kind, subject string) decide.Decision {
		t.Helper()
		d, err := e.lim.Take(ctx, decide.Request{Action: "password_reset", Subjects: []decide.Subject{{Kind: kind, Subject: subject}}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	t.Run("default", func(t *testing.T) {
		e := newEnv(t, func(_ *decide.Config, s *decide.ServerConfig) { s.RLSMode = decide.RLSTake })
		e.set = mustRules(t, strictOnce)
		if d := take(e, "email", "Victim@x.example"); !d.Allowed {
			t.Fatalf("first take: %+v", d)
		}
		for _, v := range []string{"VICTIM@X.example", " victim@x.example", "victim@x.example\r\n", "\tVictim@X.Example "} {
			if d := take(e, "email", v); d.Allowed {
				t.Errorf("take of %q allowed: a fresh counter for a spelling of victim@x.example", v)
			}
			d, err := e.lim.Check(ctx, decide.Request{Action: "password_reset", Exact: true, Subjects: []decide.Subject{{Kind: "email", Subject: v}}})
			if err != nil || d.Allowed || len(d.Limits) != 1 || d.Limits[0].Subject != "victim@x.example" || d.Limits[0].Count != 1 {
				t.Errorf("exact check of %q: %+v %v, want denied, victim@x.example counted once", v, d, err)
			}
		}
		code, body := postTake(t, e, url.Values{"action": {"password_reset"}, "email": {"VICTIM@x.example "}})
		if code != http.StatusTooManyRequests || body.Subject != "victim@x.example" {
			t.Errorf("HTTP take of another spelling: %d %+v, want 429 on victim@x.example", code, body)
		}
		for _, v := range []string{"Victim@X.EXAMPLE", "victim@x.example\t"} {
			rr, err := rlsClient(t, e.srv.RLSAddr()).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "password_reset",
				Descriptors: []*commonv3.RateLimitDescriptor{descriptor("email", v)}})
			if err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || rr.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("RLS take of %q: %v %v, want OVER_LIMIT, its descriptor's too", v, rr, err)
			}
		}
		// IPv4-mapped IPv6 is its IPv4 address.
		if d := take(e, "ip", "::ffff:198.51.100.7"); !d.Allowed {
			t.Fatalf("first take of the mapped address: %+v", d)
		}
		if d := take(e, "ip", "198.51.100.7"); d.Allowed {
			t.Errorf("take of 198.51.100.7 allowed after ::ffff:198.51.100.7")
		}
		var subjects []string
		for _, ev := range e.counted(t) {
			subjects = append(subjects, ev.Kind+":"+ev.Subject)
			if ev.Key() != ev.Kind+":"+ev.Subject {
				t.Errorf("event %+v keyed %q", ev, ev.Key())
			}
		}
		slices.Sort(subjects)
		if len(subjects) != 2 || subjects[0] != "email:victim@x.example" || subjects[1] != "ip:198.51.100.7" {
			t.Errorf("counted events %v, want email:victim@x.example and ip:198.51.100.7, as counted", subjects)
		}
	})
	t.Run("opt out", func(t *testing.T) {
		e := newEnv(t)
		e.set = mustRules(t, strictOnce+"kinds:\n  email: {normalize: none}\n")
		for _, v := range []string{"Victim@x.example", "VICTIM@X.example"} {
			if d := take(e, "email", v); !d.Allowed {
				t.Errorf("take of %q with normalize: none: %+v, want its own counter", v, d)
			}
		}
	})
}

// The limiter's memory (checks not exact) holds what the aggregator
// counted from events of several spellings, under the one subject.
func TestMemoryHoldsTheSpellingsCounted(t *testing.T) {
	e := newEnv(t)
	e.set = mustRules(t, probeRules+"  - name: probe-email\n    action: probe\n    kinds: [email]\n    limits: [2/1h]\n")
	now := time.Now()
	// keyed by the subject counted, as the limiter's takes publish it
	p := window.Partition(window.Subject{Action: "probe", Kind: "email", Subject: "victim@x.example"}, testPartitions)
	var evs []event.Event
	for _, s := range []string{"Victim@x.example", "VICTIM@X.EXAMPLE ", " victim@x.example"} {
		evs = append(evs, event.Event{V: 1, ID: event.NewID(), Action: "probe", Kind: "email", Subject: s, TS: now, N: 1})
	}
	e.applyTo(t, p, evs, now)
	for _, s := range []string{"victim@x.example", "Victim@X.Example"} {
		d, err := e.lim.Check(context.Background(), decide.Request{Action: "probe", Subjects: []decide.Subject{{Kind: "email", Subject: s}}})
		if err != nil || d.Allowed {
			t.Errorf("check of %q from memory: %+v %v, want denied (3 events over 2/1h)", s, d, err)
		}
	}
}
