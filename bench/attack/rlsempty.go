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

// rlsEmptyValue: Envoy sends an empty header's descriptor with an empty
// value (X-User-Email: with nothing after it). Two RLS takes of one IP
// beside email= over a strict 1/m: the IP must be decided and counted (OK,
// then OVER_LIMIT). The empty value made the whole call InvalidArgument,
// which Envoy's default failure_mode_deny: false lets through, and nothing
// was counted.
func rlsEmptyValue(ctx context.Context, e *env) (Row, error) {
	row := Row{Tried: "two RLS takes (--rls-mode take) of one IP beside an empty e-mail (`email=`, an empty X-User-Email header) over a strict 1/m"}
	rules, err := e.writeRules(strictRules)
	if err != nil {
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
	rls := rlsv3.NewRateLimitServiceClient(cc)
	in := &rlsv3.RateLimitRequest{Domain: "password_reset", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "ip", Value: "198.51.100.20"}}},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "email", Value: ""}}},
	}}
	var got []string
	for range 2 {
		resp, err := rls.ShouldRateLimit(ctx, in)
		got = append(got, rlsOutcome(resp, err))
	}
	row.Pass = got[0] == rlsv3.RateLimitResponse_OK.String() && got[1] == rlsv3.RateLimitResponse_OVER_LIMIT.String()
	row.Held = fmt.Sprintf("before (36c81e2): InvalidArgument, InvalidArgument (a pass to Envoy's default, nothing counted); after: %s (the empty value is no subject, as on every surface)",
		strings.Join(got, ", "))
	return row, nil
}
