package operator_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
)

// Inspect tells counts, records and the decision with why, before and after
// each write: an unban clears the decision but not the counts (memory
// allows, the exact counts still deny until the next event decides again),
// a reset zeroes the counts, a ban denies whatever they are.
func TestInspectThroughUnbanBanAndReset(t *testing.T) {
	rdb := stacktest.Redis(t)
	e := newEnv(t, rdb, stacktest.Prefix(t, rdb))
	ctx := context.Background()
	now := time.Now()
	e.apply(t, "login_failed", "ip", "203.0.113.50", 6, now)
	e.apply(t, "login_failed", "email", "ops@example.com", 6, now)
	e.apply(t, "visit", "ip", "203.0.113.50", 4, now)

	r := req("login_failed", "ip", "203.0.113.50", "email", "ops@example.com")
	r.Operator = ""
	in, err := e.op.Inspect(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	ip, ops := in.Subjects[0], in.Subjects[1]
	if len(ip.Rules) != 1 || len(ip.Rules[0].Limits) != 2 || ip.Rules[0].Limits[0].Count != 6 || !ip.Rules[0].Limits[0].Exceeded ||
		ip.Rules[0].Limits[1].Count != 6 || ip.Rules[0].Limits[1].Exceeded {
		t.Fatalf("ip rules %+v", ip.Rules)
	}
	if ip.Deny == nil || ip.Deny.Rule != "login-failed" || ip.Deny.Since == nil || ip.Deny.Since.Sub(now) > time.Second || ip.State == nil || ip.Ban != nil {
		t.Fatalf("ip records %+v %+v %+v", ip.Deny, ip.State, ip.Ban)
	}
	if !ops.Rules[0].Allowlisted || ops.Deny != nil {
		t.Fatalf("allowlisted subject %+v", ops)
	}
	for _, c := range []operator.CheckView{in.Memory, in.Exact} {
		if c.Allowed || !strings.Contains(c.Why[0], "denied by rule login-failed: ip 203.0.113.50 has 6 events in its 1m window") ||
			!contains(c.Why, "email ops@example.com is allowlisted by every rule of it") {
			t.Fatalf("why %q", c.Why)
		}
	}
	// The exact counts show how far over the allowlisted subject is.
	if !contains(in.Exact.Why, "rule login-failed allowlists email ops@example.com: over 5/1m") {
		t.Fatalf("exact why %q", in.Exact.Why)
	}
	vis, err := e.op.Inspect(ctx, operator.Request{Action: "visit", Subjects: r.Subjects[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if vis.Subjects[0].Shadow == nil || !vis.Memory.Allowed || !contains(vis.Memory.Why, "shadow rule visit would deny ip 203.0.113.50") {
		t.Fatalf("shadow: %+v %q", vis.Subjects[0].Shadow, vis.Memory.Why)
	}

	// unban: the decision goes, the counts stay.
	res, err := e.op.Unban(ctx, req("login_failed", "ip", "203.0.113.50"))
	if err != nil {
		t.Fatal(err)
	}
	if res.AppliedHere == nil || !*res.AppliedHere || !slices.Equal(res.Subjects[0].Cleared, []string{"deny", "state"}) {
		t.Fatalf("unban %+v", res)
	}
	in, err = e.op.Inspect(ctx, operator.Request{Action: "login_failed", Subjects: r.Subjects[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if in.Subjects[0].Deny != nil || in.Subjects[0].State != nil || in.Subjects[0].Rules[0].Limits[0].Count != 6 ||
		!in.Memory.Allowed || in.Exact.Allowed || !contains(in.Memory.Why, "memory allows while the exact counts deny") {
		t.Fatalf("after unban: %+v memory %q exact %q", in.Subjects[0], in.Memory.Why, in.Exact.Why)
	}

	// ban: denied whatever the counts, with who and until.
	r = req("login_failed", "ip", "203.0.113.50")
	r.For, r.Message = time.Hour, "ticket 9"
	if _, err := e.op.Ban(ctx, r); err != nil {
		t.Fatal(err)
	}
	in, _ = e.op.Inspect(ctx, operator.Request{Action: "login_failed", Subjects: r.Subjects})
	if b := in.Subjects[0].Ban; b == nil || b.Operator != "alice" || b.Message != "ticket 9" || b.RetryAfter < 3590 ||
		in.Memory.Allowed || !strings.Contains(in.Memory.Why[0], "is banned by alice") {
		t.Fatalf("after ban: %+v %q", in.Subjects[0].Ban, in.Memory.Why)
	}

	// reset: no counts, no ban, allowed everywhere.
	res, err = e.op.Reset(ctx, req("login_failed", "ip", "203.0.113.50"))
	if err != nil {
		t.Fatal(err)
	}
	// (its keys: the second and minute hashes; a 1h window writes no hour level)
	if s := res.Subjects[0]; s.DeletedKeys < 2 || s.Offset == nil || *s.Offset != e.offs[s.Partition] || !slices.Contains(s.Cleared, "ban") {
		t.Fatalf("reset %+v (next offset %d)", s, e.offs[s.Partition])
	}
	in, _ = e.op.Inspect(ctx, operator.Request{Action: "login_failed", Subjects: r.Subjects})
	if in.Subjects[0].Rules[0].Limits[0].Count != 0 || in.Subjects[0].Rules[0].Limits[1].Count != 0 || !in.Memory.Allowed || !in.Exact.Allowed {
		t.Fatalf("after reset: %+v", in)
	}
	if d := e.decide(t, "take", "login_failed", "ip", "203.0.113.50"); !d.Allowed {
		t.Fatalf("take after reset: %+v", d)
	}
}

func contains(lines []string, part string) bool {
	for _, l := range lines {
		if strings.Contains(l, part) {
			return true
		}
	}
	return false
}

// Bad requests are refused before anything is written, as invalid.
func TestOperatorRefusesBadRequests(t *testing.T) {
	rdb := stacktest.Redis(t)
	e := newEnv(t, rdb, stacktest.Prefix(t, rdb))
	ctx := context.Background()
	ban := func(mod func(*operator.Request)) func() error {
		return func() error {
			r := req("login_failed", "ip", "192.0.2.1")
			r.For = time.Hour
			mod(&r)
			_, err := e.op.Ban(ctx, r)
			return err
		}
	}
	unban := func(mod func(*operator.Request)) func() error {
		return func() error {
			r := req("login_failed", "ip", "192.0.2.1")
			mod(&r)
			_, err := e.op.Unban(ctx, r)
			return err
		}
	}
	for name, call := range map[string]func() error{
		"no action":           unban(func(r *operator.Request) { r.Action = "" }),
		"no subject":          unban(func(r *operator.Request) { r.Subjects = nil }),
		"bad kind":            unban(func(r *operator.Request) { r.Subjects[0].Kind = "I P" }),
		"empty subject":       unban(func(r *operator.Request) { r.Subjects[0].Subject = "" }),
		"no operator":         unban(func(r *operator.Request) { r.Operator = "" }),
		"operator with space": unban(func(r *operator.Request) { r.Operator = "a b" }),
		"unban with duration": unban(func(r *operator.Request) { r.For = time.Hour }),
		"bad rule name":       unban(func(r *operator.Request) { r.Rule = "Rule X" }),
		"ban without for":     ban(func(r *operator.Request) { r.For = 0 }),
		"ban too long":        ban(func(r *operator.Request) { r.For = operator.MaxBan + time.Second }),
		"ban with a rule":     ban(func(r *operator.Request) { r.Rule = "login-failed" }),
		"ban control char":    ban(func(r *operator.Request) { r.Message = "a\nb" }),
		"ban without rules":   ban(func(r *operator.Request) { r.Action = "nothing_limits_this" }),
		"reset of a rule": func() error {
			r := req("login_failed", "ip", "192.0.2.1")
			r.Rule = "login-failed"
			_, err := e.op.Reset(ctx, r)
			return err
		},
		"reset without rules": func() error { _, err := e.op.Reset(ctx, req("nothing", "ip", "192.0.2.1")); return err },
		"inspect with rule": func() error {
			r := req("login_failed", "ip", "192.0.2.1")
			r.Rule = "x"
			_, err := e.op.Inspect(ctx, r)
			return err
		},
	} {
		if err := call(); !operator.IsInvalid(err) {
			t.Errorf("%s: %v, want an invalid request", name, err)
		}
	}
	if e.state.Seq(0)+e.state.Seq(1)+e.state.Seq(2)+e.state.Seq(3) != 0 {
		t.Fatal("a refused request wrote a change entry")
	}
	// A subject that is not valid as it stands is named by its digest, as
	// the limiter and the aggregator decide and count it.
	long := strings.Repeat("x", 300)
	r := req("login_failed", "ip", long)
	res, err := e.op.Unban(ctx, r)
	if err != nil || len(res.Subjects) != 1 || res.Subjects[0].Subject != event.CanonicalSubject(long) {
		t.Fatalf("unban of an overlong subject: %+v %v, want its digest", res, err)
	}
}

// On Redis Cluster, subjects of every partition (every primary) are banned
// and unbanned: memory, exact checks and strict takes follow. The CLI works
// on the cluster too (several --redis-addr seeds).
func TestBanAndUnbanOnRedisCluster(t *testing.T) {
	rdb := stacktest.ClusterRedis(t)
	prefix := stacktest.ClusterPrefix(t, rdb)
	e := newEnv(t, rdb, prefix)
	ctx := context.Background()
	var emails []string
	seen := map[int]bool{}
	for i := 0; len(seen) < testPartitions; i++ {
		em := "user" + itoa(i) + "@example.com"
		r := req("password_reset", "email", em)
		p := partitionOf(r)
		if !seen[p] {
			seen[p] = true
			emails = append(emails, em)
		}
	}
	for _, em := range emails {
		r := req("password_reset", "email", em)
		r.For = time.Hour
		res, err := e.op.Ban(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if !*res.AppliedHere {
			t.Fatalf("ban of %s not applied by the limiter within %s", em, operator.DefaultApplyWait)
		}
		for _, how := range []string{"memory", "exact", "take"} {
			if d := e.decide(t, how, "password_reset", "email", em); d.Allowed || !d.Denial.Banned {
				t.Fatalf("%s of banned %s: %+v", how, em, d)
			}
		}
	}
	for _, em := range emails {
		res, err := e.op.Unban(ctx, req("password_reset", "email", em))
		if err != nil || !*res.AppliedHere {
			t.Fatalf("unban %s: %+v %v", em, res, err)
		}
		for _, how := range []string{"memory", "exact", "take"} {
			if d := e.decide(t, how, "password_reset", "email", em); !d.Allowed {
				t.Fatalf("%s of unbanned %s: %+v", how, em, d)
			}
		}
	}

	// The CLI, on the cluster's seeds; the partition count from a topic of
	// as many partitions.
	bs := stacktest.Brokers(t)
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"FLOODGATE_BROKERS=" + strings.Join(bs, ","), "FLOODGATE_TOPIC=" + stacktest.Topic(t, bs, testPartitions),
		"FLOODGATE_REDIS_ADDR=" + strings.Join(stacktest.ClusterRedisAddrs(), ","), "FLOODGATE_KEY_PREFIX=" + prefix,
		"FLOODGATE_RULES=" + rulesPath, "FLOODGATE_OPERATOR=erin"}
	bin := servicetest.Build(t, servicetest.Floodgate)
	em := emails[len(emails)-1]
	runCLI(t, bin, env, "ban", "--action", "password_reset", "email="+em, "--for", "2h")
	waitFor(t, "the limiter to deny after the CLI's ban", func() bool {
		return !e.decide(t, "memory", "password_reset", "email", em).Allowed
	})
	if d := e.decide(t, "take", "password_reset", "email", em); d.Allowed || !d.Denial.Banned || d.Denial.RetryAfter < 119*time.Minute {
		t.Fatalf("take after the CLI's ban: %+v", d)
	}
	if out := runCLI(t, bin, env, "inspect", "--action", "password_reset", "email="+em); !strings.Contains(string(out), "is banned by erin") {
		t.Fatalf("inspect on the cluster:\n%s", out)
	}
	runCLI(t, bin, env, "reset", "--action", "password_reset", "email="+em)
	waitFor(t, "the limiter to admit after the CLI's reset", func() bool {
		return e.decide(t, "memory", "password_reset", "email", em).Allowed
	})
	if d := e.decide(t, "exact", "password_reset", "email", em); !d.Allowed || d.Limits[0].Count != 0 {
		t.Fatalf("exact check after the CLI's reset: %+v", d)
	}
}

// A subject on a plan is judged by the plan's counts, and inspect says so.
func TestInspectShowsAPlansOverride(t *testing.T) {
	rdb := stacktest.Redis(t)
	e := newEnv(t, rdb, stacktest.Prefix(t, rdb))
	ctx := context.Background()
	now := time.Now()
	e.apply(t, "login_failed", "ip", "198.51.100.9", 6, now)
	e.apply(t, "login_failed", "ip", "203.0.113.51", 6, now)
	in, err := e.op.Inspect(ctx, operator.Request{Action: "login_failed", Subjects: req("login_failed", "ip", "198.51.100.9", "ip", "203.0.113.51").Subjects})
	if err != nil {
		t.Fatal(err)
	}
	partner, plain := in.Subjects[0], in.Subjects[1]
	if r := partner.Rules[0]; r.Override != "plan partner: scale 4" || r.Limits[0].Limit != 20 || r.Limits[1].Limit != 80 || r.Limits[0].Exceeded || partner.Deny != nil {
		t.Fatalf("the partner's rule: %+v, deny %+v", r, partner.Deny)
	}
	if r := plain.Rules[0]; r.Override != "" || r.Limits[0].Limit != 5 || !r.Limits[0].Exceeded || plain.Deny == nil {
		t.Fatalf("a subject on no plan: %+v, deny %+v", r, plain.Deny)
	}
	if !strings.Contains(in.Text(), "rule login-failed (override plan partner: scale 4)") {
		t.Fatalf("text:\n%s", in.Text())
	}
	e.apply(t, "login_failed", "ip", "198.51.100.9", 15, now)
	in, err = e.op.Inspect(ctx, operator.Request{Action: "login_failed", Subjects: req("login_failed", "ip", "198.51.100.9").Subjects})
	if err != nil {
		t.Fatal(err)
	}
	if d := in.Subjects[0].Deny; d == nil || d.Limit != 20 || d.Count != 21 || in.Exact.Allowed {
		t.Fatalf("21 events over the plan's 20/1m: deny %+v, exact %+v", d, in.Exact)
	}
}
