package limitergrpc_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/limiter/limitergrpc"
)

// A gRPC service limits its login method: a client the limiter denies gets
// ResourceExhausted with the rule's message, and the handler never runs.
// (The limiter is a stand-in that denies one address; a
// *limiterclient.Client asks the real one. grpc.NewServer(grpc.
// ChainUnaryInterceptor(unary)) installs it; here it is called directly.)
func ExampleUnaryServerInterceptor() {
	unary, err := limitergrpc.UnaryServerInterceptor(limitergrpc.Config{
		Checker: &limiterStub{deny: map[string]bool{"198.51.100.7": true}},
		Action: func(method string) string {
			if method == "/shop.v1.Accounts/Login" {
				return "login"
			}
			return "" // not limited
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	login := &grpc.UnaryServerInfo{FullMethod: "/shop.v1.Accounts/Login"}
	handler := func(context.Context, any) (any, error) { return "welcome", nil }
	for _, ip := range []string{"203.0.113.9", "198.51.100.7"} {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}})
		resp, err := unary(ctx, nil, login, handler)
		fmt.Printf("%s %v %s %q\n", ip, resp, status.Code(err), status.Convert(err).Message())
	}
	// Output:
	// 203.0.113.9 welcome OK ""
	// 198.51.100.7 <nil> ResourceExhausted "Too many logins."
}
