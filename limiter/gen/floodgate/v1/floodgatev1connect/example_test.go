package floodgatev1connect_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"connectrpc.com/connect"

	floodgatev1 "github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1"
	"github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1/floodgatev1connect"
)

// The generated client, for a caller that speaks Connect or gRPC itself
// (limiterclient wraps it); here against a stand-in limiter that allows.
func ExampleNewLimiterClient() {
	mux := http.NewServeMux()
	mux.Handle(floodgatev1connect.NewLimiterHandler(allowAll{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	c := floodgatev1connect.NewLimiterClient(srv.Client(), srv.URL)
	res, err := c.Check(context.Background(), connect.NewRequest(&floodgatev1.CheckRequest{
		Action: "visit", Subjects: []*floodgatev1.Subject{{Kind: "link", Subject: "abc"}},
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("allowed:", res.Msg.GetAllowed())
	// Output: allowed: true
}

type allowAll struct {
	floodgatev1connect.UnimplementedLimiterHandler
}

func (allowAll) Check(context.Context, *connect.Request[floodgatev1.CheckRequest]) (*connect.Response[floodgatev1.CheckResponse], error) {
	return connect.NewResponse(&floodgatev1.CheckResponse{Allowed: true}), nil
}
