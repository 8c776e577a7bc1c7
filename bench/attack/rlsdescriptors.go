package attack

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-dev/floodgate/bench/harness"
	"github.com/floodgate-dev/floodgate/event"
)

// boundSubjects is the limiter's bound on the subjects (and RLS
// descriptors) of one request: past it only the first are decided.
const boundSubjects = 16

// requestBytes is what the attacks of one large request send: the
// limiter's --max-request-bytes (64 KiB), less room for the framing.
const requestBytes = 64<<10 - 256

// rlsDescriptors: one RLS call of as many descriptors as fit in 64 KiB, the
// first an IP over its limit; the rest are fresh IPs. Deciding every
// descriptor, and matching each one's status against every subject's
// limits (a cubic scan), took one core for minutes, past the client's
// deadline. Then the same call with the IP past the bound.
func rlsDescriptors(ctx context.Context, e *env) (Row, error) {
	in := rlsCall(requestBytes, 0)
	row := Row{Tried: fmt.Sprintf("an IP over 2/h; one RLS check of %d descriptors (%d bytes, under the 64 KiB cap), that IP first, the rest fresh IPs; "+
		"then the same with the IP as descriptor %d", len(in.Descriptors), proto.Size(in), boundSubjects+1)}
	l, err := e.limiterWithDenied(ctx)
	if err != nil {
		return row, err
	}
	cc, err := grpc.NewClient(l.rls, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return row, err
	}
	defer func() { _ = cc.Close() }()
	rls := rlsv3.NewRateLimitServiceClient(cc)
	ask := func(in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second) // far more than Envoy's 0.1 s
		defer cancel()
		return rls.ShouldRateLimit(ctx, in)
	}
	var resp *rlsv3.RateLimitResponse
	var callErr error
	cost, err := callCPU(ctx, l.Pid(), func() { resp, callErr = ask(in) })
	if err != nil {
		return row, err
	}
	first := rlsOutcome(resp, callErr)
	past, pastErr := ask(rlsCall(requestBytes, boundSubjects))
	second := rlsOutcome(past, pastErr)
	// A denial or a refusal (InvalidArgument, which Envoy with
	// failure_mode_deny: true denies) holds; an OK or a timeout does not.
	held := callErr == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT
	pastHeld := pastErr == nil && past.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT || grpcstatus.Code(pastErr) == codes.InvalidArgument
	row.Pass = held && pastHeld && cost.bounded(time.Second)
	row.Held = fmt.Sprintf("before (36c81e2): 8.9 s CPU in the 10 s after the call, still busy; it answered DeadlineExceeded at 2 s, "+
		"as did the one with the IP past the bound (a pass to Envoy's default); "+
		"after: %s, answered %s with %d statuses; the IP past the bound: %s",
		cost, first, len(resp.GetStatuses()), second)
	return row, nil
}

// rlsCall is a login_failed call of fresh-IP descriptors in size bytes,
// the denied IP as descriptor at.
func rlsCall(size, at int) *rlsv3.RateLimitRequest {
	in := &rlsv3.RateLimitRequest{Domain: "login_failed"}
	desc := func(ip string) *ratelimitv3.RateLimitDescriptor {
		return &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "ip", Value: ip}}}
	}
	per := proto.Size(&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(freshIP(1 << 20))}})
	for i := 0; proto.Size(in)+per <= size; i++ {
		ip := freshIP(i)
		if i == at {
			ip = deniedIP
		}
		in.Descriptors = append(in.Descriptors, desc(ip))
	}
	return in
}

func rlsOutcome(resp *rlsv3.RateLimitResponse, err error) string {
	if err != nil {
		return grpcstatus.Code(err).String()
	}
	return resp.GetOverallCode().String()
}

// freshIP is address i of 10/8, which no event names.
func freshIP(i int) string {
	return "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
}

// deniedIP is the IP the large-request attacks put over its limit.
const deniedIP = "203.0.113.40"

// limiterWithDenied starts an aggregator and a limiter (check mode) on
// loginRules and puts deniedIP over its 2/h: the limiter's memory denies it.
func (e *env) limiterWithDenied(ctx context.Context) (*limiter, error) {
	rules, err := e.writeRules(loginRules)
	if err != nil {
		return nil, err
	}
	if _, err := e.startAggregator(ctx, rules); err != nil {
		return nil, err
	}
	l, err := e.startLimiter(ctx, rules, e.cfg.RedisAddr)
	if err != nil {
		return nil, err
	}
	pub, err := e.publisher()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	evs := make([]event.Event, 3)
	for i := range evs {
		evs[i] = event.Event{ID: e.id + "-big-" + strconv.Itoa(i), Action: "login_failed", Kind: "ip", Subject: deniedIP, TS: now}
	}
	err = pub.Publish(ctx, evs...)
	if cerr := pub.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	if err := waitFor(ctx, deniedIP+" denied from memory", time.Minute, func() (bool, error) {
		c, err := status(ctx, http.MethodGet, "http://"+l.http+"/v1/check?action=login_failed&ip="+deniedIP, nil)
		return c == http.StatusTooManyRequests, err
	}); err != nil {
		return nil, err
	}
	return l, nil
}

// cpuCost is the CPU a process spent on one call: from just before it
// until the process went idle again (busy: still working at the cap).
type cpuCost struct {
	cpu, wall time.Duration
	busy      bool
}

func (c cpuCost) bounded(limit time.Duration) bool { return !c.busy && c.cpu <= limit }

func (c cpuCost) String() string {
	s := fmt.Sprintf("%s CPU", c.cpu)
	if c.cpu == 0 {
		s = "under 10ms CPU (the resolution of /proc)"
	}
	if c.busy {
		s += fmt.Sprintf(" in the %s after the call, still busy", c.wall.Round(time.Second))
	}
	return s
}

// Polling of callCPU: the process is idle again once a poll interval adds
// less than idleCPU; it is given at most cpuCap after the call began.
const (
	cpuPoll = 250 * time.Millisecond
	idleCPU = 30 * time.Millisecond
	cpuCap  = 10 * time.Second
)

// callCPU runs call and returns the CPU process pid spent from just before
// it until it went idle (harness.ProcCPU, 10 ms resolution): a call whose
// work goes on after its answer, or after its caller gave up, is charged
// all of it, up to cpuCap.
func callCPU(ctx context.Context, pid int, call func()) (cpuCost, error) {
	start := time.Now()
	before, err := harness.ProcCPU(pid)
	if err != nil {
		return cpuCost{}, err
	}
	call()
	last := before
	for {
		select {
		case <-ctx.Done():
			return cpuCost{}, ctx.Err()
		case <-time.After(cpuPoll):
		}
		now, err := harness.ProcCPU(pid)
		if err != nil {
			return cpuCost{}, err
		}
		if now-last < idleCPU {
			// The idle interval's own CPU is background work: left out.
			return cpuCost{cpu: last - before, wall: time.Since(start)}, nil
		}
		last = now
		if time.Since(start) >= cpuCap {
			return cpuCost{cpu: now - before, wall: time.Since(start), busy: true}, nil
		}
	}
}
