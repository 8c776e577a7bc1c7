package live_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

const spellingRules = `
rules:
  - name: login
    action: login_failed
    kinds: [email]
    limits: [2/m]
  - name: stuffing
    action: login_failed
    kinds: [ip]
    limits: [2/h]
    distinct: email
`

// Issue 51: the aggregator counts the spellings of one subject (an
// e-mail's case and white space, an IPv4-mapped address) as that one
// subject, and the distinct values of an attr kind alike; its decisions
// name the subject normalized.
func TestApplyCountsSpellingsAsOneSubject(t *testing.T) {
	rdb := stacktest.Redis(t)
	st := newStore(t, rdb)
	set := mustRules(t, spellingRules)
	ctx := context.Background()
	b := &batcher{Topic: "events"}
	now := base
	var evs []eventT
	for _, s := range []string{"Victim@x.example", "VICTIM@X.EXAMPLE", " victim@x.example\t"} {
		evs = append(evs, ev("login_failed", "email", s, now))
	}
	// one IP, written two ways, failing with one e-mail written three ways
	for i, s := range []string{"Eve@x.example", "eve@x.example ", "EVE@X.EXAMPLE"} {
		e := ev("login_failed", "ip", []string{"::ffff:203.0.113.9", "203.0.113.9", "::FFFF:cb00:7109"}[i], now)
		e.Attrs = map[string]string{"email": s}
		evs = append(evs, e)
	}
	res, err := applierOf(t, st).Apply(ctx, "g", b.Batch(evs...), set, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Subjects != 2 {
		t.Errorf("%d subjects, want 2 (victim@x.example, 203.0.113.9)", res.Subjects)
	}
	if len(res.Decisions) != 1 || res.Decisions[0].Subject != "victim@x.example" || res.Decisions[0].Count != 3 {
		t.Errorf("decisions %+v, want victim@x.example denied at 3 of 2/m", res.Decisions)
	}
	victim := window.Subject{Action: "login_failed", Kind: "email", Subject: "victim@x.example"}
	assertSum(t, st, victim, now, time.Minute, 3)
	assertSum(t, st, window.Subject{Action: "login_failed", Kind: "email", Subject: "Victim@x.example"}, now, time.Minute, 0)
	ip := window.Subject{Action: "login_failed", Kind: "ip", Subject: "203.0.113.9"}
	assertSum(t, st, ip, now, time.Hour, 3)

	// Two more e-mails make three distinct: only now is the IP denied.
	res, err = applierOf(t, st).Apply(ctx, "g", b.Batch(
		withAttr(ev("login_failed", "ip", "203.0.113.9", now), "email", "Other@x.example"),
		withAttr(ev("login_failed", "ip", "203.0.113.9", now), "email", "third@x.example"),
	), set, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Decisions) != 1 || res.Decisions[0].Subject != "203.0.113.9" || res.Decisions[0].Count != 3 {
		t.Errorf("decisions %+v, want 203.0.113.9 denied at 3 distinct e-mails of 2/h", res.Decisions)
	}
}

func withAttr(e eventT, kind, value string) eventT {
	e.Attrs = map[string]string{kind: value}
	return e
}
