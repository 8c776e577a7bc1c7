package attack

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-dev/floodgate/event"
)

const strictRules = `rules:
  - name: password-reset
    action: password_reset
    kinds: [email, ip]
    limits: [1/m, 3/h]
    strict: true
`

// badSubjects are what an app that does not trim or normalize its input
// passes on: each is no valid subject as it stands.
var badSubjects = map[string]string{
	"300-byte e-mail":   strings.Repeat("a", 300-len("@example.com")) + "@example.com",
	"e-mail with a TAB": "victim@example.com\t",
	"e-mail with a NUL": "victim\x00@example.com",
	"invalid UTF-8":     "victim" + invalidUTF8 + "@example.com",
}

// invalidSubject: an IP over a strict 1/m limit sends takes and checks
// whose other subject is one the limiter cannot use as it stands, over
// HTTP and over RLS (where an error would be an allow under Envoy's
// default failure_mode_deny: false).
func invalidSubject(ctx context.Context, e *env) (Row, error) {
	row := Row{Tried: "an IP over a strict 1/m limit sends takes and checks (HTTP /v1/take, /v1/check, RLS take) " +
		"with a 300-byte, a TAB, a NUL and an invalid-UTF-8 e-mail beside it, 5 each"}
	rules, err := e.writeRules(strictRules)
	if err != nil {
		return row, err
	}
	// The aggregator brings the take's count to every limiter's memory,
	// where plain checks read it.
	if _, err := e.startAggregator(ctx, rules); err != nil {
		return row, err
	}
	l, err := e.startLimiter(ctx, rules, e.cfg.RedisAddr, "--rls-mode", "take")
	if err != nil {
		return row, err
	}
	const ip = "198.51.100.7"
	take := func(ip, email string) (int, error) {
		q := url.Values{"action": {"password_reset"}, "ip": {ip}, "email": {email}}
		return status(ctx, http.MethodPost, "http://"+l.http+"/v1/take?"+q.Encode(), nil)
	}
	if code, err := take(ip, "first@example.com"); err != nil || code != http.StatusOK {
		return row, fmt.Errorf("first take: %d %v", code, err)
	}
	if err := waitFor(ctx, "the IP's check denied from memory", time.Minute, func() (bool, error) {
		c, err := status(ctx, http.MethodGet, "http://"+l.http+"/v1/check?action=password_reset&ip="+ip, nil)
		return c == http.StatusTooManyRequests, err
	}); err != nil {
		return row, err
	}
	cc, err := grpc.NewClient(l.rls, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return row, err
	}
	defer func() { _ = cc.Close() }()

	passed, errs, asked := 0, 0, 0
	var seen []string
	for name, bad := range badSubjects {
		for range 5 {
			q := url.Values{"action": {"password_reset"}, "ip": {ip}, "email": {bad}}
			for _, r := range []struct{ method, path string }{{http.MethodPost, "/v1/take"}, {http.MethodGet, "/v1/check"}} {
				asked++
				code, err := status(ctx, r.method, "http://"+l.http+r.path+"?"+q.Encode(), nil)
				switch {
				case err != nil:
					errs++
				case code != http.StatusTooManyRequests:
					passed++
					seen = append(seen, fmt.Sprintf("%s %s → %d", r.path, name, code))
				}
			}
			asked++
			resp, err := askRLS(ctx, cc, &rlsv3.RateLimitRequest{Domain: "password_reset", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "ip", Value: ip}}},
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "email", Value: bad}}},
			}})
			switch {
			case err != nil:
				// Envoy's default failure_mode_deny: false lets an error through.
				passed++
				seen = append(seen, fmt.Sprintf("RLS %s → error %v", name, err))
			case resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT:
				passed++
				seen = append(seen, fmt.Sprintf("RLS %s → %s", name, resp.GetOverallCode()))
			}
		}
	}
	// The overlong e-mail is counted under its digest: a take of it from a
	// fresh IP is allowed once, and the next one (another IP) is denied by
	// the e-mail's 1/m.
	long := badSubjects["300-byte e-mail"] + ".org"
	first, err1 := take("198.51.100.8", long)
	second, err2 := take("198.51.100.9", long)
	counted := err1 == nil && err2 == nil && first == http.StatusOK && second == http.StatusTooManyRequests
	row.Pass = passed == 0 && errs == 0 && counted
	row.Held = fmt.Sprintf("let through %d of %d (transport errors %d); a fresh overlong e-mail counted under its digest (~sha256:…) from two IPs: %d then %d",
		passed, asked, errs, first, second)
	if len(seen) > 0 {
		row.Held += "; through: " + strings.Join(seen, "; ")
	}
	return row, nil
}

// invalidUTF8 is sent as Envoy sends a header's bytes: as they are. Go's
// protobuf will not encode it, so askRLS encodes a placeholder of the same
// length and swaps the bytes in.
const (
	invalidUTF8 = "\xff\xfe\xfd"
	placeholder = "\x01X\x01"
)

// askRLS sends req to the RLS server byte for byte as Envoy would, invalid
// UTF-8 included.
func askRLS(ctx context.Context, cc *grpc.ClientConn, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	enc := proto.Clone(req).(*rlsv3.RateLimitRequest)
	for _, d := range enc.Descriptors {
		for _, en := range d.Entries {
			en.Value = strings.ReplaceAll(en.Value, invalidUTF8, placeholder)
		}
	}
	b, err := proto.Marshal(enc)
	if err != nil {
		return nil, err
	}
	b = bytes.ReplaceAll(b, []byte(placeholder), []byte(invalidUTF8))
	resp := &rlsv3.RateLimitResponse{}
	err = cc.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", b, resp, grpc.ForceCodec(rawCodec{}))
	return resp, err
}

// rawCodec sends pre-encoded bytes.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return nil, fmt.Errorf("raw codec: %T is not bytes", v)
}

func (rawCodec) Unmarshal(b []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("raw codec: %T is not a message", v)
	}
	return proto.Unmarshal(b, m)
}

const loginRules = `rules:
  - name: login-failed
    action: login_failed
    kinds: [ip]
    limits: [2/h]
`

// degradedRedis: a subject denied by its counts and one an operator
// banned, both known to the limiter's memory; then Redis stops answering
// (a proxy holds the limiter's connections open and forwards nothing) and
// the attacker asks for exact checks (Floodgate-Exact: 1) and non-strict
// takes, which go to Redis.
func degradedRedis(ctx context.Context, e *env) (Row, error) {
	row := Row{Tried: "a subject over 2/h and an operator-banned one; Redis stops answering (connections held open); " +
		"10 exact checks (Floodgate-Exact: 1) and 10 takes each"}
	rules, err := e.writeRules(loginRules)
	if err != nil {
		return row, err
	}
	if _, err := e.startAggregator(ctx, rules); err != nil {
		return row, err
	}
	px, err := startProxy(e.cfg.RedisAddr)
	if err != nil {
		return row, err
	}
	defer func() { _ = px.Close() }()
	l, err := e.startLimiter(ctx, rules, px.Addr(), "--redis-timeout", "50ms")
	if err != nil {
		return row, err
	}
	const denied, banned, fresh = "203.0.113.10", "203.0.113.11", "203.0.113.12"
	pub, err := e.publisher()
	if err != nil {
		return row, err
	}
	now := time.Now()
	evs := make([]event.Event, 3)
	for i := range evs {
		evs[i] = event.Event{ID: fmt.Sprintf("%s-d-%d", e.id, i), Action: "login_failed", Kind: "ip", Subject: denied, TS: now}
	}
	err = pub.Publish(ctx, evs...)
	if cerr := pub.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return row, fmt.Errorf("publish: %w", err)
	}
	ban := url.Values{"action": {"login_failed"}, "ip": {banned}}
	code, err := status(ctx, http.MethodPost, "http://"+l.admin+"/v1/admin/ban?"+ban.Encode(),
		map[string]string{"Authorization": "Bearer " + adminSecret, "Floodgate-For": "1h"})
	if err != nil || code != http.StatusOK {
		return row, fmt.Errorf("ban: %d %v", code, err)
	}
	check := func(ip string, header map[string]string) (int, error) {
		return status(ctx, http.MethodGet, "http://"+l.http+"/v1/check?action=login_failed&ip="+ip, header)
	}
	for _, ip := range []string{denied, banned} {
		if err := waitFor(ctx, ip+" denied from memory", time.Minute, func() (bool, error) {
			c, err := check(ip, nil)
			return c == http.StatusTooManyRequests, err
		}); err != nil {
			return row, err
		}
	}
	px.Cut()
	exact := map[string]string{"Floodgate-Exact": "1"}
	passed, asked := 0, 0
	for _, ip := range []string{denied, banned} {
		for range 10 {
			asked += 2
			if c, err := check(ip, exact); err != nil || c != http.StatusTooManyRequests {
				passed++
			}
			if c, err := status(ctx, http.MethodPost, "http://"+l.http+"/v1/take?action=login_failed&ip="+ip, nil); err != nil || c != http.StatusTooManyRequests {
				passed++
			}
		}
	}
	freshCode, _ := check(fresh, exact)
	row.Pass = passed == 0
	row.Held = fmt.Sprintf("let through %d of %d; a subject memory knows nothing of answered %d (--failure-mode open)", passed, asked, freshCode)
	return row, nil
}
