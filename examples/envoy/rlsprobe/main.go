// Command rlsprobe asks a rate limit service what Envoy's ratelimit filter
// would ask, and prints what Envoy would do with the answer: pass the
// request, or answer 429 with the service's headers. It lets you see the
// first 429 of the README without an Envoy, and check a deployed limiter
// the way the proxy calls it.
//
//	go run ./examples/envoy/rlsprobe -n 6 link_create ip=203.0.113.7
//
// The domain is floodgate's action; every key=value argument is one
// descriptor of one entry (several entries joined by "," make a composite
// descriptor, e.g. ip=203.0.113.7,path=/login).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

func main() {
	addr := flag.String("addr", envOr("FLOODGATE_RLS_ADDR", "127.0.0.1:8081"), "The rate limit service: the limiter's --rls-addr (env FLOODGATE_RLS_ADDR, as the limiter's).")
	n := flag.Int("n", 1, "Requests to send, one after another.")
	timeout := flag.Duration("timeout", 5*time.Second, "Give up on one request after this long.")
	token := flag.String("token", os.Getenv("FLOODGATE_AUTH_TOKEN"), "Bearer token of a limiter that requires one (env FLOODGATE_AUTH_TOKEN, as the limiter's).")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: rlsprobe [flags] DOMAIN KEY=VALUE[,KEY=VALUE...]...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 2 || *n < 1 {
		flag.Usage()
		os.Exit(2)
	}
	req, err := request(flag.Arg(0), flag.Args()[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "rlsprobe: %v\n", err)
		os.Exit(2)
	}
	if err := probe(*addr, *token, req, *n, *timeout); err != nil {
		fmt.Fprintf(os.Stderr, "rlsprobe: %v\n", err)
		os.Exit(1)
	}
}

// request builds what Envoy sends: one descriptor per argument, its
// entries in the order written.
func request(domain string, args []string) (*rlsv3.RateLimitRequest, error) {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, arg := range args {
		d := &commonv3.RateLimitDescriptor{}
		for _, kv := range strings.Split(arg, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("descriptor entry %q: want key=value", kv)
			}
			d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req, nil
}

func probe(addr, token string, req *rlsv3.RateLimitRequest, n int, timeout time.Duration) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	for i := 1; i <= n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		resp, err := client.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		fmt.Println(describe(i, resp))
	}
	return nil
}

// describe says what Envoy does with resp.
func describe(i int, resp *rlsv3.RateLimitResponse) string {
	var hdrs []string
	for _, h := range resp.GetResponseHeadersToAdd() {
		hdrs = append(hdrs, h.GetKey()+": "+h.GetValue())
	}
	what := "OK: Envoy passes the request on"
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		what = "OVER_LIMIT: Envoy answers 429 Too Many Requests"
	}
	if len(hdrs) > 0 {
		what += " (" + strings.Join(hdrs, "; ") + ")"
	}
	return fmt.Sprintf("%d %s", i, what)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
