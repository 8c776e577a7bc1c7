package attack

import (
	"context"
	"fmt"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// emailCase (issue 51): an attacker who guesses passwords under a strict
// 1/m per e-mail varies the e-mail's case and pads it with white space, and
// writes the IP as an IPv4-mapped IPv6 address: each spelling was a subject
// of its own with a fresh counter. RLS takes, as Envoy sends them.
func emailCase(ctx context.Context, e *env) (Row, error) {
	row := Row{Tried: "RLS takes against a strict 1/m: Victim…@x.example, then VICTIM…@X.example, \" victim…@x.example \", " +
		"\"Victim…@x.example\\t\"; ::ffff:198.51.100.77, then 198.51.100.77"}
	rules, err := e.writeRules(strictRules)
	if err != nil {
		return row, err
	}
	if _, err := e.startAggregator(ctx, rules); err != nil {
		return row, err
	}
	l, err := e.startLimiter(ctx, rules, e.cfg.RedisAddr, "--rls-mode", "take")
	if err != nil {
		return row, err
	}
	cc, err := grpc.NewClient(l.rls, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return row, err
	}
	defer func() { _ = cc.Close() }()
	take := func(kind, subject string) (string, error) {
		resp, err := askRLS(ctx, cc, &rlsv3.RateLimitRequest{Domain: "password_reset", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: kind, Value: subject}}},
		}})
		if err != nil {
			return "", err
		}
		return resp.GetOverallCode().String(), nil
	}
	local := "victim." + e.id
	tries := []struct {
		kind, first string
		variants    []string
	}{
		{"email", "Victim." + e.id + "@x.example", []string{strings.ToUpper(local) + "@X.example", " " + local + "@x.example ", "Victim." + e.id + "@x.example\t"}},
		{"ip", "::ffff:198.51.100.77", []string{"198.51.100.77"}},
	}
	var codes []string
	passed, asked := 0, 0
	for _, tr := range tries {
		first, err := take(tr.kind, tr.first)
		if err != nil {
			return row, fmt.Errorf("first take of %s: %w", tr.first, err)
		}
		if first != rlsv3.RateLimitResponse_OK.String() {
			return row, fmt.Errorf("first take of %s: %s, want OK (a fresh subject)", tr.first, first)
		}
		codes = append(codes, first)
		for _, v := range tr.variants {
			asked++
			code, err := take(tr.kind, v)
			if err != nil {
				// Envoy's default failure_mode_deny: false lets an error through.
				code = "error " + err.Error()
			}
			if code != rlsv3.RateLimitResponse_OVER_LIMIT.String() {
				passed++
			}
			codes = append(codes, code)
		}
	}
	row.Pass = passed == 0
	row.Held = fmt.Sprintf("let through %d of %d other spellings (answers in order: %s)", passed, asked, strings.Join(codes, ", "))
	return row, nil
}
