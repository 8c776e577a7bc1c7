package decide_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/decide"
	floodgatev1 "github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1"
)

// rawCodec sends pre-encoded bytes as they are: Go's protobuf will not
// encode invalid UTF-8, which Envoy's C++ protobuf sends from a header.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return nil, fmt.Errorf("raw codec: %T", v)
}
func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }

// withInvalidUTF8 encodes req and swaps the placeholder "\x01X\x01" in it
// for the invalid UTF-8 "\xff\xfe\xfd".
func withInvalidUTF8(t *testing.T, req proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	out := bytes.Replace(b, []byte("\x01X\x01"), []byte("\xff\xfe\xfd"), -1)
	if bytes.Equal(out, b) {
		t.Fatal("no placeholder in the request")
	}
	return out
}

// Envoy sends descriptor values from headers byte for byte: invalid UTF-8
// must not fail the call (a failed call is a pass under Envoy's default
// failure_mode_deny: false). The IP over its limit is denied beside it, and
// the e-mail is decided on its digest. Connect's binary protobuf reads the
// same way.
func TestInvalidUTF8IsASubjectNotAnError(t *testing.T) {
	e := newEnv(t, func(_ *decide.Config, s *decide.ServerConfig) { s.RLSMode = decide.RLSTake })
	e.set = mustRules(t, resetRules)
	ctx := context.Background()
	const ip = "198.51.100.41"
	if code, body := postTake(t, e, url.Values{"action": {"password_reset"}, "ip": {ip}, "email": {"first@example.com"}}); code != http.StatusOK {
		t.Fatalf("first take: %d %+v", code, body)
	}
	conn, err := grpc.NewClient(e.srv.RLSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ask := func(ip string) (*rlsv3.RateLimitResponse, error) {
		raw := withInvalidUTF8(t, &rlsv3.RateLimitRequest{Domain: "password_reset", Descriptors: []*commonv3.RateLimitDescriptor{
			descriptor("ip", ip), descriptor("email", "victim\x01X\x01@example.com")}})
		resp := &rlsv3.RateLimitResponse{}
		err := conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", raw, resp, grpc.ForceCodec(rawCodec{}))
		return resp, err
	}
	rr, err := ask(ip)
	if err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || rr.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("RLS take, ip over its limit, e-mail with invalid UTF-8: %v %v, want OVER_LIMIT on the ip", rr, err)
	}
	// From fresh IPs the e-mail is taken twice, then denied at its own 2/1m:
	// one stable subject, its digest.
	for i, from := range []string{"198.51.100.42", "198.51.100.43", "198.51.100.44"} {
		rr, err := ask(from)
		want := rlsv3.RateLimitResponse_OK
		if i == 2 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if err != nil || rr.OverallCode != want {
			t.Fatalf("RLS take %d of the e-mail from %s: %v %v, want %s", i+1, from, rr, err, want)
		}
	}
	digest := event.CanonicalSubject("victim\xff\xfe\xfd@example.com")
	d, err := e.lim.Check(ctx, decide.Request{Action: "password_reset", Exact: true, Subjects: []decide.Subject{{Kind: "email", Subject: digest}}})
	if err != nil || len(d.Limits) != 1 || d.Limits[0].Count != 2 {
		t.Fatalf("exact check of the digest: %+v %v, want count 2", d.Limits, err)
	}

	// Connect, binary protobuf, the same bytes in a CheckRequest.
	raw := withInvalidUTF8(t, limiterCheckRequest("password_reset", ip, "victim\x01X\x01@example.com"))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+e.srv.HTTPAddr()+"/floodgate.v1.Limiter/Check", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/proto")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Connect check with invalid UTF-8: HTTP %d, want 200 with a decision", resp.StatusCode)
	}
	if err := checkDenied(resp); err != nil {
		t.Fatal(err)
	}
}

// limiterCheckRequest is an exact check of an ip and an e-mail.
func limiterCheckRequest(action, ip, email string) *floodgatev1.CheckRequest {
	return &floodgatev1.CheckRequest{Action: action, Exact: true, Subjects: []*floodgatev1.Subject{
		{Kind: "ip", Subject: ip}, {Kind: "email", Subject: email}}}
}

// checkDenied reads a Connect binary CheckResponse and wants a denial.
func checkDenied(resp *http.Response) error {
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var out floodgatev1.CheckResponse
	if err := proto.Unmarshal(b, &out); err != nil {
		return fmt.Errorf("connect check response: %w", err)
	}
	if out.GetAllowed() || out.GetDenial() == nil {
		return fmt.Errorf("connect check, ip over its limit beside invalid UTF-8: %v, want denied", &out)
	}
	return nil
}
