package decide_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// A ban denies a subject with no counts at all — from memory, exactly and
// in a strict take, which counts nothing — over an allowlist too, with the
// ban's message and retry time; an unban lets it through again at once.
func TestBanDeniesEveryCheckWhateverTheCounts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now()
	ban := func(sub window.Subject, op operator.AdminOp) {
		t.Helper()
		res, err := writerOf(t, e.store).Admin(ctx, now, operator.AdminRequest{Op: op, Subject: sub, Operator: "alice", Until: now.Add(time.Hour), Message: "ticket 7"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the state to apply the "+string(op), func() bool { return e.state.Seq(res.Partition) >= res.Seq })
	}
	email := window.Subject{Action: "password_reset", Kind: "email", Subject: "banned@example.com"}
	ops := window.Subject{Action: "login_failed", Kind: "email", Subject: "ops@example.com"} // allowlisted
	ban(email, operator.OpBan)
	ban(ops, operator.OpBan)

	for _, tc := range []struct {
		name string
		sub  window.Subject
		run  func(decide.Request) (decide.Decision, error)
	}{
		{"memory", email, func(r decide.Request) (decide.Decision, error) { return e.lim.Check(ctx, r) }},
		{"exact", email, func(r decide.Request) (decide.Decision, error) { r.Exact = true; return e.lim.Check(ctx, r) }},
		{"take", email, func(r decide.Request) (decide.Decision, error) { return e.lim.Take(ctx, r) }},
		{"allowlisted memory", ops, func(r decide.Request) (decide.Decision, error) { return e.lim.Check(ctx, r) }},
		{"allowlisted exact", ops, func(r decide.Request) (decide.Decision, error) { r.Exact = true; return e.lim.Check(ctx, r) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := tc.run(decide.Request{Action: tc.sub.Action, Subjects: []decide.Subject{{Kind: tc.sub.Kind, Subject: tc.sub.Subject}}})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || d.Denial == nil || !d.Denial.Banned || d.Denial.Message != "ticket 7" || d.Denial.Rule != "" ||
				d.Denial.RetryAfter < 59*time.Minute || d.Counted {
				t.Fatalf("decision %+v denial %+v", d, d.Denial)
			}
		})
	}
	if counted := e.counted(t); len(counted) != 0 || len(e.pub.plain) != 0 {
		t.Fatalf("a denied take published: %+v %+v", counted, e.pub.plain)
	}

	// HTTP: 429, Retry-After, "banned" in the body.
	resp, err := http.Get("http://" + e.srv.HTTPAddr() + "/v1/check?action=password_reset&email=banned@example.com")
	if err != nil {
		t.Fatal(err)
	}
	var body limitapi.CheckResult
	err = json.NewDecoder(resp.Body).Decode(&body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusTooManyRequests || !body.Banned || body.Message != "ticket 7" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("http: %d %+v %v", resp.StatusCode, body, err)
	}

	ban(email, operator.OpUnban)
	for _, exact := range []bool{false, true} {
		d, err := e.lim.Check(ctx, decide.Request{Action: email.Action, Exact: exact, Subjects: []decide.Subject{{Kind: email.Kind, Subject: email.Subject}}})
		if err != nil || !d.Allowed {
			t.Fatalf("exact=%v after unban: %+v %v", exact, d, err)
		}
	}
	if d, err := e.lim.Take(ctx, decide.Request{Action: email.Action, Subjects: []decide.Subject{{Kind: email.Kind, Subject: email.Subject}}}); err != nil || !d.Allowed || !d.Counted {
		t.Fatalf("take after unban: %+v %v", d, err)
	}
}

// A limiter that starts while a ban is in force has it from the snapshot;
// a ban that ended denies nothing.
func TestBanInSnapshotAndItsEnd(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now()
	sub := window.Subject{Action: "login_failed", Kind: "ip", Subject: "203.0.113.77"}
	if _, err := writerOf(t, e.store).Admin(ctx, now, operator.AdminRequest{Op: operator.OpBan, Subject: sub, Operator: "alice", Until: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	p := window.Partition(sub, testPartitions)
	snap, err := e.store.Snapshot(ctx, p, now)
	if err != nil {
		t.Fatal(err)
	}
	st := decide.NewState()
	st.Reset(p, snap)
	if b, ok := st.Ban(sub, now); !ok || b.Operator != "alice" {
		t.Fatalf("ban from the snapshot: %+v %v", b, ok)
	}
	if _, ok := st.Ban(sub, now.Add(time.Minute)); ok {
		t.Fatal("ban in force after its end")
	}
	st.Sweep(now.Add(time.Minute))
	if _, ok := st.Ban(sub, now); ok {
		t.Fatal("ban kept by the sweep after its end")
	}
	// The default message when the operator gave none.
	waitFor(t, "the limiter to hold the ban", func() bool { _, ok := e.state.Ban(sub, time.Now()); return ok })
	d, err := e.lim.Check(ctx, decide.Request{Action: sub.Action, Subjects: []decide.Subject{{Kind: sub.Kind, Subject: sub.Subject}}})
	if err != nil || d.Allowed || d.Denial.Message == "" {
		t.Fatalf("check of a ban without message: %+v %v", d, err)
	}
}
