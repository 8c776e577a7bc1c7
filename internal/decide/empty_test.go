package decide_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/limiter/limiterclient"
	"github.com/floodgate-dev/floodgate/limiter/limitermw"
)

// An empty subject is no subject, on every surface: an IP beside an empty
// e-mail (a header sent empty, X-User-Email:) is decided and counted as if
// the e-mail were absent, so a take over a strict 1/m is allowed once and
// then denied. Before, RLS, Connect/gRPC and the Go API refused the whole
// request ("subject is required"): the IP was neither decided nor counted,
// and Envoy with its default failure_mode_deny: false let every such call
// through. A request of empty subjects only is refused: nothing to decide.
func TestEmptySubjectIsNoSubject(t *testing.T) {
	e := newEnv(t, func(_ *decide.Config, s *decide.ServerConfig) { s.RLSMode = decide.RLSTake })
	e.set = mustRules(t, resetRules)
	ctx := context.Background()
	rls := rlsClient(t, e.srv.RLSAddr())
	client := func(protocol string) *limiterclient.Client {
		c, err := limiterclient.New(limiterclient.Config{BaseURL: "http://" + e.srv.HTTPAddr(), Protocol: protocol, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	grpcClient, connectClient := client("grpc"), client("connect")
	mw, err := limitermw.New(limitermw.Config{Checker: e.lim, Take: true, Action: "password_reset",
		Subjects: func(r *http.Request) []decide.Subject {
			return []decide.Subject{{Kind: "ip", Subject: r.Header.Get("X-Real-IP")}, {Kind: "email", Subject: r.Header.Get("X-User-Email")}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	app := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := func(ip string, emails ...string) decide.Request {
		r := decide.Request{Action: "password_reset", Subjects: []decide.Subject{{Kind: "ip", Subject: ip}}}
		for _, m := range emails {
			r.Subjects = append(r.Subjects, decide.Subject{Kind: "email", Subject: m})
		}
		return r
	}
	// Each surface takes ip beside an empty e-mail; allowed reports the
	// answer, err a refusal.
	surfaces := []struct {
		name string
		take func(ip string) (allowed bool, err error)
	}{
		{"RLS", func(ip string) (bool, error) {
			resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "password_reset", Descriptors: []*commonv3.RateLimitDescriptor{
				descriptor("ip", ip), descriptor("email", "")}})
			return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK, err
		}},
		{"HTTP", func(ip string) (bool, error) {
			code, _ := postTake(t, e, url.Values{"action": {"password_reset"}, "ip": {ip}, "email": {""}})
			return code == http.StatusOK, nil
		}},
		{"gRPC", func(ip string) (bool, error) {
			d, err := grpcClient.Take(ctx, req(ip, ""))
			return d.Allowed, err
		}},
		{"Connect", func(ip string) (bool, error) {
			d, err := connectClient.Take(ctx, req(ip, ""))
			return d.Allowed, err
		}},
		{"Go", func(ip string) (bool, error) {
			d, err := e.lim.Take(ctx, req(ip, ""))
			return d.Allowed, err
		}},
		{"limitermw", func(ip string) (bool, error) {
			r := httptest.NewRequest(http.MethodPost, "/reset", nil)
			r.Header.Set("X-Real-IP", ip)
			r.Header.Set("X-User-Email", "")
			w := httptest.NewRecorder()
			app.ServeHTTP(w, r)
			return w.Code == http.StatusOK, nil
		}},
	}
	for i, s := range surfaces {
		ip := "198.51.100." + strconv.Itoa(100+i)
		for k, want := range []bool{true, false} {
			if allowed, err := s.take(ip); err != nil || allowed != want {
				t.Errorf("%s: take %d of ip %s beside an empty e-mail over a strict 1/m: allowed %v (%v), want %v", s.name, k+1, ip, allowed, err, want)
			}
		}
	}

	// Empty subjects only: nothing to decide, refused.
	_, err = rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "password_reset", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("email", "")}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("RLS take of an empty e-mail alone: %v, want InvalidArgument", err)
	}
	if _, err := e.lim.Take(ctx, decide.Request{Action: "password_reset", Subjects: []decide.Subject{{Kind: "email"}}}); decide.ErrorCode(err) != decide.CodeInvalid {
		t.Errorf("take of an empty e-mail alone: %v, want a refusal", err)
	}
}
