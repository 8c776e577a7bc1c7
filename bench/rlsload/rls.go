package rlsload

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Codes a scenario expects.
const (
	OK        = rlsv3.RateLimitResponse_OK
	OverLimit = rlsv3.RateLimitResponse_OVER_LIMIT
)

// ParseCode parses "ok" or "over_limit".
func ParseCode(s string) (rlsv3.RateLimitResponse_Code, error) {
	switch s {
	case "ok":
		return OK, nil
	case "over_limit":
		return OverLimit, nil
	}
	return 0, fmt.Errorf("rls code %q: want ok or over_limit", s)
}

// Shape is the form of a scenario's requests: the domain (floodgate's
// action) and one descriptor per kind with one entry each, as Envoy sends
// one descriptor per rate_limits action (ip from x-real-ip, email from a
// header...). Each request names subject i of every kind, i drawn uniformly
// from [Base, Base+Subjects).
type Shape struct {
	Domain     string
	Kinds      []string
	Subjects   int
	Base       int
	HitsAddend uint32 // 0: one (the limiter's default)
}

// Subject names subject i of a kind, the same for every run: IPs from the
// benchmarking range 198.18.0.0/15 (i < 131072), other kinds
// "<kind>-<i>@bench.example".
func Subject(kind string, i int) string {
	if kind == "ip" {
		return "198." + strconv.Itoa(18+(i>>16)) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	}
	return kind + "-" + strconv.Itoa(i) + "@bench.example"
}

// Requests returns the shape's requests, one per subject index: built once,
// so the generator's own cost per call is a random pick. A proto message is
// safe to marshal from many goroutines.
func (s Shape) Requests() []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, max(s.Subjects, 1))
	for i := range reqs {
		r := &rlsv3.RateLimitRequest{Domain: s.Domain, HitsAddend: s.HitsAddend}
		for _, k := range s.Kinds {
			r.Descriptors = append(r.Descriptors, &ratelimitv3.RateLimitDescriptor{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: Subject(k, s.Base+i)}},
			})
		}
		reqs[i] = r
	}
	return reqs
}

// Client holds a load generator's connections to one RLS server: Envoy
// keeps one HTTP/2 connection per worker thread to its rate limit cluster,
// so Dial opens a few and spreads callers over them.
type Client struct {
	conns []*grpc.ClientConn
	stubs []rlsv3.RateLimitServiceClient
}

// Dial connects to an RLS server at addr (plaintext HTTP/2, as Envoy's
// cluster on loopback) over conns connections (at least 1).
func Dial(addr string, conns int) (*Client, error) {
	return dial(addr, conns, insecure.NewCredentials())
}

// DialTLS is Dial over TLS (a limiter with --tls-cert), trusting cfg's CA.
func DialTLS(addr string, conns int, cfg *tls.Config) (*Client, error) {
	return dial(addr, conns, credentials.NewTLS(cfg))
}

func dial(addr string, conns int, creds credentials.TransportCredentials) (*Client, error) {
	c := &Client{}
	for range max(conns, 1) {
		// Each ClientConn is its own HTTP/2 connection.
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("rls load: dial %s: %w", addr, err), c.Close())
		}
		c.conns = append(c.conns, cc)
		c.stubs = append(c.stubs, rlsv3.NewRateLimitServiceClient(cc))
	}
	return c, nil
}

// Close closes the connections.
func (c *Client) Close() error {
	var errs []error
	for _, cc := range c.conns {
		errs = append(errs, cc.Close())
	}
	return errors.Join(errs...)
}

// Op returns the lookup of a shape: a random subject's request on the
// caller's connection, expecting want as the overall code.
func (c *Client) Op(s Shape, want rlsv3.RateLimitResponse_Code) Op {
	reqs := s.Requests()
	return func(ctx context.Context, worker int, rng *rand.Rand) (bool, error) {
		resp, err := c.stubs[worker%len(c.stubs)].ShouldRateLimit(ctx, reqs[rng.IntN(len(reqs))])
		if err != nil {
			return false, err
		}
		return resp.GetOverallCode() == want, nil
	}
}

// Ask sends one request of a shape, for subject index i, and returns the
// overall code.
func (c *Client) Ask(ctx context.Context, s Shape, i int) (rlsv3.RateLimitResponse_Code, error) {
	one := s
	one.Base, one.Subjects = s.Base+i, 1
	resp, err := c.stubs[0].ShouldRateLimit(ctx, one.Requests()[0])
	if err != nil {
		return 0, err
	}
	return resp.GetOverallCode(), nil
}

// WaitReady calls the server with a shape's first request until it
// answers (any code) or timeout passes.
func (c *Client) WaitReady(ctx context.Context, s Shape, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Ask(cctx, s, 0)
		ccancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rls load: server not answering: %w (last error %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitCode waits until every subject of the shape answers want, asking up
// to 16 at a time: a limiter answers from memory fed by change streams, so
// a deny written to Redis reaches it a stream read later.
func (c *Client) WaitCode(ctx context.Context, s Shape, want rlsv3.RateLimitResponse_Code, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range max(s.Subjects, 1) {
		g.Go(func() error {
			for {
				code, err := c.Ask(gctx, s, i)
				if err == nil && code == want {
					return nil
				}
				select {
				case <-gctx.Done():
					return fmt.Errorf("rls load: subject %d of %s never answered %v: %w (last %v, %v)", s.Base+i, s.Domain, want, gctx.Err(), code, err)
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
	return g.Wait()
}
