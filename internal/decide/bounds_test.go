package decide_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-dev/floodgate/internal/decide"
	floodgatev1 "github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1"
)

// The cost of a request is bounded by its size on every surface: the
// largest request each accepts (64 KiB of subjects, one of them an IP over
// its limit) is answered after looking at most MaxSubjects (16) subjects up,
// allocating at most maxAllocPerByte bytes per request byte (the server's
// work and the test client's on loopback) and answering fewer bytes than it
// was sent. Before, every subject was decided before the bound refused the
// request: an RLS call of ~4,400 descriptors took minutes of a core (the
// statuses were a cubic scan), a 64 KiB POST to /v1/check allocated 38 MiB
// and answered 4 MB.
const (
	// maxAllocPerByte: decoding alone costs 8 to 21 bytes per byte (a
	// descriptor or form value of ~15 bytes becomes a message or a map
	// entry, and strings), as measured from 16 to 64 KiB (docs/limiter.md);
	// Connect's JSON decoding once took 37 on a loaded machine. Linear is
	// the point: before the bound, a 64 KiB request allocated 600 a byte.
	maxAllocPerByte = 64
	// decided is what floodgate_limiter_subjects_total counts; its bound
	// per request is decide.DefaultMaxSubjects.
	subjectsMetric = "floodgate_limiter_subjects_total"
)

// requestSizes are the sizes each surface is sent: a quarter, a half and
// all of --max-request-bytes (less a little for the framing), so that the
// cost per byte is seen to hold as the request grows.
var requestSizes = []int{decide.DefaultMaxRequestBytes / 4, decide.DefaultMaxRequestBytes / 2, decide.DefaultMaxRequestBytes - 256}

// bounded is one surface's cost for one request: allocated bytes and
// subjects decided per call, and the answer's size. The bytes are the
// fewest allocated over several calls after a first one: a surface's first
// calls fill caches and pools (a megabyte for the first Connect calls), and
// background work may run beside any one call.
type bounded struct {
	in, out  int
	alloc    uint64
	subjects float64
}

// measure runs call runs times and returns its cost; call returns the
// answer's size in bytes.
func measure(t *testing.T, reg *prometheus.Registry, in int, call func() int) bounded {
	t.Helper()
	const runs = 5
	b := bounded{in: in, alloc: ^uint64(0)}
	call()
	before := metricValue(t, reg, subjectsMetric)
	for range runs {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		b.out = call()
		runtime.ReadMemStats(&m1)
		b.alloc = min(b.alloc, m1.TotalAlloc-m0.TotalAlloc)
	}
	b.subjects = (metricValue(t, reg, subjectsMetric) - before) / runs
	return b
}

// check fails t unless b is within the bounds.
func (b bounded) check(t *testing.T, what string) {
	t.Helper()
	t.Logf("%s: %d bytes in, %d out, %d allocated (%.1f a byte), %.0f subjects decided", what, b.in, b.out, b.alloc, float64(b.alloc)/float64(b.in), b.subjects)
	if b.alloc > uint64(maxAllocPerByte*b.in) {
		t.Errorf("%s: %d bytes allocated for %d bytes sent, want at most %d a byte", what, b.alloc, b.in, maxAllocPerByte)
	}
	if b.out > b.in {
		t.Errorf("%s: answered %d bytes to %d, want at most as many", what, b.out, b.in)
	}
	if b.subjects > decide.DefaultMaxSubjects {
		t.Errorf("%s: %.0f subjects decided, want at most %d", what, b.subjects, decide.DefaultMaxSubjects)
	}
}

// freshIP is address i of 10/8: no rule has seen it.
func freshIP(i int) string {
	return "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
}

// rlsFill is an RLS call of login_failed with the denied IP (if any) as
// descriptor at and fresh IPs in every other, as many as fit in size bytes.
func rlsFill(size, at int, denied string) *rlsv3.RateLimitRequest {
	in := &rlsv3.RateLimitRequest{Domain: "login_failed"}
	per := proto.Size(&rlsv3.RateLimitRequest{Descriptors: []*commonv3.RateLimitDescriptor{descriptor("ip", freshIP(1<<20))}})
	for i := 0; proto.Size(in)+per <= size; i++ {
		ip := freshIP(i)
		if i == at {
			ip = denied
		}
		in.Descriptors = append(in.Descriptors, descriptor("ip", ip))
	}
	return in
}

func TestRLSCallCostIsBoundedByItsSize(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, withRegistry(reg))
	const denied = "203.0.113.77"
	e.apply(t, "login_failed", "ip", denied, 6, time.Now()) // over 5/1m
	rls := rlsClient(t, e.srv.RLSAddr())
	call := func(in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return rls.ShouldRateLimit(ctx, in)
	}
	for _, size := range requestSizes {
		in := rlsFill(size, 0, denied)
		var resp *rlsv3.RateLimitResponse
		var err error
		b := measure(t, reg, proto.Size(in), func() int {
			resp, err = call(in)
			return proto.Size(resp)
		})
		if err != nil {
			t.Fatalf("%d descriptors, the first over its limit: %v", len(in.Descriptors), err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(resp.Statuses) != decide.DefaultMaxSubjects ||
			resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%d descriptors, the first over its limit: %s with %d statuses, want OVER_LIMIT on the first of 16", len(in.Descriptors), resp.OverallCode, len(resp.Statuses))
		}
		b.check(t, "RLS call of "+strconv.Itoa(len(in.Descriptors))+" descriptors")
	}
	// Past the bound nothing is read: a denial there is not seen, and the
	// call is refused (Envoy with failure_mode_deny: true denies it).
	for _, at := range []int{decide.DefaultMaxSubjects, -1} {
		in := rlsFill(decide.DefaultMaxRequestBytes-256, at, denied)
		_, err := call(in)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors, at most 16") {
			t.Errorf("%d descriptors, the one at %d over its limit: %v, want InvalidArgument naming the bound", len(in.Descriptors), at, err)
		}
	}
	// A descriptor of too many entries is refused unread, and a denial
	// beside it still wins.
	long := descriptor()
	for i := range decide.MaxDescriptorEntries + 1 {
		long.Entries = append(long.Entries, &commonv3.RateLimitDescriptor_Entry{Key: "k" + strconv.Itoa(i), Value: "v"})
	}
	for _, tc := range []struct {
		ip   string
		want codes.Code
	}{{denied, codes.OK}, {freshIP(7), codes.InvalidArgument}} {
		resp, err := call(&rlsv3.RateLimitRequest{Domain: "login_failed", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("ip", tc.ip), long}})
		if status.Code(err) != tc.want || (err == nil && resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT) {
			t.Errorf("ip %s beside a descriptor of %d entries: %v %v, want %s", tc.ip, len(long.Entries), resp, err, tc.want)
		}
	}
}

// formFill is a form of login_failed with the denied IP first and fresh
// IPs after it, as many as fit in size bytes.
func formFill(size int, denied string) string {
	var b strings.Builder
	b.WriteString("action=login_failed&ip=" + denied)
	for i := 0; ; i++ {
		p := "&ip=" + freshIP(i)
		if b.Len()+len(p) > size {
			return b.String()
		}
		b.WriteString(p)
	}
}

// post sends body to path and returns the status and the answer's size
// (header fields and body).
func post(t *testing.T, url, contentType string, body []byte) (int, int, []byte) {
	t.Helper()
	resp, err := http.Post(url, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	n := len(out)
	for k, vs := range resp.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return resp.StatusCode, n, out
}

func TestHTTPAndConnectCostIsBoundedByItsSize(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, withRegistry(reg))
	const denied = "203.0.113.78"
	e.apply(t, "login_failed", "ip", denied, 6, time.Now()) // over 5/1m
	base := "http://" + e.srv.HTTPAddr()
	for _, size := range requestSizes {
		form := []byte(formFill(size, denied))
		n := bytes.Count(form, []byte("&ip="))
		for _, path := range []string{"/v1/check", "/v1/take"} {
			var code int
			var answer []byte
			b := measure(t, reg, len(form), func() int {
				var out int
				code, out, answer = post(t, base+path, "application/x-www-form-urlencoded", form)
				return out
			})
			if code != http.StatusTooManyRequests {
				t.Fatalf("POST %s of %d subjects, the first over its limit: %d %s, want 429", path, n, code, answer)
			}
			b.check(t, "POST "+path+" of "+strconv.Itoa(n)+" subjects")
		}

		// Connect, binary and JSON: as many subjects as fit.
		msg := &floodgatev1.CheckRequest{Action: "login_failed", Subjects: []*floodgatev1.Subject{{Kind: "ip", Subject: denied}}}
		for i := 0; proto.Size(msg) < size-20; i++ {
			msg.Subjects = append(msg.Subjects, &floodgatev1.Subject{Kind: "ip", Subject: freshIP(i)})
		}
		bin, err := proto.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		var js []byte
		for {
			if js, err = protojson.Marshal(msg); err != nil {
				t.Fatal(err)
			}
			if len(js) <= size {
				break
			}
			msg.Subjects = msg.Subjects[:len(msg.Subjects)*size/len(js)]
		}
		for _, enc := range []struct {
			contentType string
			body        []byte
		}{{"application/proto", bin}, {"application/json", js}} {
			var code int
			var answer []byte
			b := measure(t, reg, len(enc.body), func() int {
				var out int
				code, out, answer = post(t, base+"/floodgate.v1.Limiter/Check", enc.contentType, enc.body)
				return out
			})
			var d floodgatev1.CheckResponse
			var derr error
			if enc.contentType == "application/json" {
				derr = protojson.Unmarshal(answer, &d)
			} else {
				derr = proto.Unmarshal(answer, &d)
			}
			if code != http.StatusOK || derr != nil || d.GetAllowed() || d.GetDenial() == nil {
				t.Fatalf("Connect check (%s) of %d bytes, the first subject over its limit: %d %v %.200s, want denied", enc.contentType, len(enc.body), code, derr, answer)
			}
			b.check(t, "Connect check ("+enc.contentType+") of "+strconv.Itoa(len(enc.body))+" bytes")
		}
	}
}

// A request whose context has ended decides nothing: its caller is gone.
func TestEndedContextDecidesNothing(t *testing.T) {
	e := newEnv(t)
	e.set = mustRules(t, testRules)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := decide.Request{Action: "password_reset", Subjects: []decide.Subject{{Kind: "email", Subject: "gone@example.com"}}}
	for _, op := range []func(context.Context, decide.Request) (decide.Decision, error){e.lim.Check, e.lim.Take} {
		if d, err := op(ctx, req); !errors.Is(err, context.Canceled) {
			t.Errorf("decision with an ended context: %+v %v, want context.Canceled", d, err)
		}
	}
	d, err := e.lim.Check(context.Background(), decide.Request{Action: "password_reset", Exact: true, Subjects: req.Subjects})
	if err != nil || len(d.Limits) == 0 || d.Limits[0].Count != 0 || len(e.counted(t)) != 0 {
		t.Errorf("after a take with an ended context: %+v %v, want nothing counted", d.Limits, err)
	}
}
