package rlsload_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-dev/floodgate/bench/rlsload"
)

// noop serves rlsload.Noop on a free loopback port until the test ends.
func noop(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rlsload.NewNoopServer()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func TestNoopAnswersOKForEveryDescriptor(t *testing.T) {
	addr := noop(t)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	shape := rlsload.Shape{Domain: "login_failed", Kinds: []string{"ip", "email"}, Subjects: 1}
	resp, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(context.Background(), shape.Requests()[0])
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOverallCode() != rlsload.OK || len(resp.GetStatuses()) != 2 {
		t.Fatalf("answer %v, want OK with 2 statuses", resp)
	}
	for i, st := range resp.GetStatuses() {
		if st.GetCode() != rlsload.OK {
			t.Errorf("status %d: %v", i, st.GetCode())
		}
	}
}

func TestRunClosedLoopAgainstNoop(t *testing.T) {
	cl, err := rlsload.Dial(noop(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	shape := rlsload.Shape{Domain: "d", Kinds: []string{"ip"}, Subjects: 100}
	if err := cl.WaitReady(context.Background(), shape, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	res, err := rlsload.Run(context.Background(), rlsload.Config{Op: cl.Op(shape, rlsload.OK), Concurrency: 4, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops == 0 || res.Errors != 0 || res.Unexpected != 0 || res.Concurrency != 4 || res.Paced() {
		t.Fatalf("result %+v: want answers, all expected, no errors", res)
	}
	if !(res.P50 <= res.P99 && res.P99 <= res.P999 && res.P999 <= res.Max) {
		t.Errorf("percentiles out of order: %+v", res)
	}
	// Expecting OVER_LIMIT from a server that allows: every answer is unexpected.
	res, err = rlsload.Run(context.Background(), rlsload.Config{Op: cl.Op(shape, rlsload.OverLimit), Concurrency: 2, Duration: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops == 0 || res.Unexpected != res.Ops {
		t.Errorf("over_limit expected from a no-op: %+v, want every answer unexpected", res)
	}
}

// A paced run sends what its schedule says, whatever the answers: every
// lookup scheduled in the measured part is counted, errors apart.
func TestRunPacedSendsTheSchedule(t *testing.T) {
	op := func(context.Context, int, *rand.Rand) (bool, error) { return true, nil }
	failing := func(context.Context, int, *rand.Rand) (bool, error) {
		return false, errors.New("no answer")
	}
	res, err := rlsload.Run(context.Background(), rlsload.Config{Op: op, Rate: 1000, Duration: 200 * time.Millisecond, Warmup: -1, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 200 || !res.Paced() || res.Rate != 1000 {
		t.Fatalf("paced 1000/s for 200ms: %+v, want 200 answers", res)
	}
	res, err = rlsload.Run(context.Background(), rlsload.Config{Op: failing, Rate: 1000, Duration: 100 * time.Millisecond, Warmup: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 0 || res.Errors != 100 || res.FirstError != "no answer" {
		t.Fatalf("failing op: %+v, want 100 errors and no answers", res)
	}
}

func TestSubjectsAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range []string{"ip", "email"} {
		for i := range 131072 {
			s := rlsload.Subject(k, i)
			if seen[s] {
				t.Fatalf("subject %s named twice", s)
			}
			seen[s] = true
		}
	}
	if got := rlsload.Subject("ip", 65536+258); got != "198.19.1.2" {
		t.Errorf("ip 65794 = %s", got)
	}
}
