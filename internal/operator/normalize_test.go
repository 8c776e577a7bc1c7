package operator_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// Issue 51: an operator names a subject in any spelling the limiter would
// count as it (an e-mail's case and white space, an IPv6 address of a /64)
// and acts on the subject counted: inspect reads its counts, ban, unban and
// reset reach what the limiter consults, and two spellings are one subject.
func TestOperatorActsOnTheSubjectCounted(t *testing.T) {
	rdb := stacktest.Redis(t)
	e := newEnv(t, rdb, stacktest.Prefix(t, rdb))
	ctx := context.Background()
	now := time.Now()
	e.apply(t, "login_failed", "email", "victim@x.example", 6, now)
	e.apply(t, "login_failed", "ip", "2001:db8:5:5::/64", 6, now)

	in, err := e.op.Inspect(ctx, req("login_failed", "email", " Victim@X.example", "ip", "2001:DB8:5:5::9"))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"victim@x.example", "2001:db8:5:5::/64"} {
		s := in.Subjects[i]
		if s.Subject != want || s.Deny == nil || len(s.Rules) != 1 || len(s.Rules[0].Limits) != 2 || s.Rules[0].Limits[0].Count != 6 {
			t.Errorf("inspect subject %d: %+v, want %s with its 6 events and its deny record", i, s, want)
		}
	}
	if in.Memory.Allowed || in.Exact.Allowed {
		t.Errorf("inspect: memory %+v, exact %+v, want both denied", in.Memory, in.Exact)
	}

	res, err := e.op.Reset(ctx, req("login_failed", "email", "VICTIM@x.example", "email", "victim@X.EXAMPLE "))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Subjects) != 1 || res.Subjects[0].Subject != "victim@x.example" || res.Subjects[0].DeletedKeys == 0 ||
		!slices.Contains(res.Subjects[0].Cleared, "deny") {
		t.Fatalf("reset of two spellings: %+v, want one subject, victim@x.example, its keys deleted", res.Subjects)
	}
	if d := e.decide(t, "exact", "login_failed", "email", "victim@x.example"); !d.Allowed || d.Limits[0].Count != 0 {
		t.Fatalf("after the reset: %+v, want allowed at 0", d)
	}

	r := req("login_failed", "email", "Victim@X.Example")
	r.For = time.Hour
	if _, err := e.op.Ban(ctx, r); err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"check", "exact", "take"} {
		if d := e.decide(t, how, "login_failed", "email", "victim@x.example"); d.Allowed || d.Denial == nil || !d.Denial.Banned {
			t.Errorf("%s after a ban of Victim@X.Example: %+v, want banned", how, d)
		}
	}
	res, err = e.op.Unban(ctx, req("login_failed", "email", "\tvictim@x.EXAMPLE"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Subjects[0].Cleared, "ban") {
		t.Errorf("unban of another spelling cleared %v, want the ban", res.Subjects[0].Cleared)
	}
	if d := e.decide(t, "check", "login_failed", "email", "victim@x.example"); !d.Allowed {
		t.Errorf("check after the unban: %+v", d)
	}
}
