package decide

import (
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/event"
)

func TestRLSHitsAddend(t *testing.T) {
	desc := func(h *uint64) *commonv3.RateLimitDescriptor {
		d := &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "ip", Value: "192.0.2.1"}}}
		if h != nil {
			d.HitsAddend = wrapperspb.UInt64(*h)
		}
		return d
	}
	u := func(v uint64) *uint64 { return &v }
	for _, tt := range []struct {
		name      string
		req       uint32
		descs     []*uint64
		n         int64
		checkOnly bool
	}{
		{name: "none: 1", descs: []*uint64{nil}, n: 1},
		{name: "request level", req: 3, descs: []*uint64{nil, nil}, n: 3},
		{name: "descriptor overrides", req: 1, descs: []*uint64{u(5)}, n: 5},
		{name: "descriptors agree", req: 2, descs: []*uint64{u(4), u(4)}, n: 4},
		{name: "descriptor equals request", req: 4, descs: []*uint64{u(4), nil}, n: 4},
		// An error would be an allow to Envoy's default: the largest count.
		{name: "descriptors differ", descs: []*uint64{u(2), u(3)}, n: 3},
		{name: "descriptor differs from request", req: 2, descs: []*uint64{nil, u(3)}, n: 3},
		{name: "zero beside a count", descs: []*uint64{u(0), u(2)}, n: 2},
		{name: "zero: check only", req: 5, descs: []*uint64{u(0)}, n: 1, checkOnly: true},
		// The limiter refuses n past MaxN itself, denying a subject over a limit.
		{name: "over MaxN", descs: []*uint64{u(1 << 40)}, n: event.MaxN + 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := &rlsv3.RateLimitRequest{Domain: "a", HitsAddend: tt.req}
			for _, h := range tt.descs {
				in.Descriptors = append(in.Descriptors, desc(h))
			}
			req, _, checkOnly, bad := rlsRequest(in, nil, DefaultMaxSubjects, nil)
			if req.N != tt.n || checkOnly != tt.checkOnly || bad != nil {
				t.Fatalf("n=%d checkOnly=%v (%v), want n=%d checkOnly=%v", req.N, checkOnly, bad, tt.n, tt.checkOnly)
			}
		})
	}
}
