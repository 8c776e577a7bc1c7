package limiterclient_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	floodgatev1 "github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1"
	"github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1/floodgatev1connect"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
	"github.com/floodgate-dev/floodgate/limiter/limiterclient"
)

// A login handler asks the limiter before checking the password, and
// answers 429 with the retry time when denied. (Here the limiter is a
// stand-in that denies every IP; `floodgate limiter serve` is the real one.)
func Example() {
	limiter := httptest.NewServer(denyAll())
	defer limiter.Close()

	c, err := limiterclient.New(limiterclient.Config{BaseURL: limiter.URL, Protocol: "connect"})
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := c.Check(context.Background(), limitapi.Request{
		Action:   "login_failed",
		Subjects: []limitapi.Subject{{Kind: "ip", Subject: "203.0.113.7"}, {Kind: "email", Subject: "victim@x.example"}},
	})
	if err != nil {
		// No answer (the limiter down, a timeout): fail open or closed, as
		// the route decides.
		fmt.Println("no answer:", err)
		return
	}
	if !d.Allowed {
		fmt.Printf("429: %s (retry in %s)\n", d.Denial.Message, d.RetryAfter().Round(time.Second))
	}
	// Output: 429: Too many failed logins. (retry in 42s)
}

// denyAll is a floodgate.v1.Limiter that denies every check.
func denyAll() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(floodgatev1connect.NewLimiterHandler(denier{}))
	return mux
}

type denier struct {
	floodgatev1connect.UnimplementedLimiterHandler
}

func (denier) Check(_ context.Context, r *connect.Request[floodgatev1.CheckRequest]) (*connect.Response[floodgatev1.CheckResponse], error) {
	s := r.Msg.GetSubjects()[0]
	return connect.NewResponse(&floodgatev1.CheckResponse{Denial: &floodgatev1.Denial{
		Rule: "login-failed", Kind: s.GetKind(), Subject: s.GetSubject(), Limit: 5, Window: durationpb.New(time.Minute),
		RetryAfter: durationpb.New(42 * time.Second), Message: "Too many failed logins.",
	}}), nil
}
