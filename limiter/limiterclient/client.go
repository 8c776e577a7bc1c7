// Package limiterclient is the Go client of the floodgate limiter: Check and
// Take over gRPC (HTTP/2 without TLS, the default) or the Connect protocol,
// returning limitapi.Decision.
//
//	c, err := limiterclient.New(limiterclient.Config{BaseURL: "http://127.0.0.1:8080"})
//	if err != nil { ... }
//	d, err := c.Check(ctx, limitapi.Request{Action: "login_failed",
//		Subjects: []limitapi.Subject{{Kind: "ip", Subject: ip}, {Kind: "email", Subject: email}}})
//	if err == nil && !d.Allowed {
//		// d.Denial.Message, d.RetryAfter()
//	}
//
// Public: what a Go service embeds to ask a limiter; it links limitapi and
// the generated floodgate.v1 types, and no Redis, Kafka or server code.
package limiterclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	floodgatev1 "github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1"
	"github.com/floodgate-dev/floodgate/limiter/gen/floodgate/v1/floodgatev1connect"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// Config configures a Client.
type Config struct {
	// BaseURL of the limiter's HTTP address, e.g. "http://127.0.0.1:8080".
	// Required.
	BaseURL string
	// Protocol is "grpc" (default) or "connect" (HTTP/1.1 or 2, protobuf).
	Protocol string
	// Token is sent as "Authorization: Bearer <token>" when set.
	Token string
	// Timeout bounds each call. Default 250ms: a limiter answers within its
	// own Redis timeout (50ms by default) plus the network.
	Timeout time.Duration
	// TLS, when set, is how to reach an https BaseURL (the CA, a client
	// certificate); the default client then speaks HTTP/2 over TLS.
	TLS *tls.Config
	// HTTPClient defaults to a client that speaks HTTP/2 without TLS (with
	// TLS when BaseURL is https).
	HTTPClient *http.Client
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.BaseURL == "":
		return errors.New("limiterclient: base URL is required")
	case c.Protocol != "" && c.Protocol != "grpc" && c.Protocol != "connect":
		return fmt.Errorf("limiterclient: protocol %q: want grpc or connect", c.Protocol)
	case c.Timeout < 0:
		return fmt.Errorf("limiterclient: timeout %s is negative", c.Timeout)
	}
	return nil
}

// Client calls a limitapi. It is safe for concurrent use.
type Client struct {
	rpc     floodgatev1connect.LimiterClient
	token   string
	timeout time.Duration
}

// New validates cfg and returns a Client; it does not connect.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		var p http.Protocols
		p.SetHTTP1(true)
		if cfg.Protocol != "connect" {
			p = http.Protocols{}
			p.SetUnencryptedHTTP2(true)
			p.SetHTTP2(true)
		}
		hc = &http.Client{Transport: &http.Transport{
			Protocols:           &p,
			TLSClientConfig:     cfg.TLS,
			DialContext:         (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	var opts []connect.ClientOption
	if cfg.Protocol != "connect" {
		opts = append(opts, connect.WithGRPC())
	}
	c := &Client{rpc: floodgatev1connect.NewLimiterClient(hc, cfg.BaseURL, opts...), token: cfg.Token, timeout: cfg.Timeout}
	if c.timeout == 0 {
		c.timeout = 250 * time.Millisecond
	}
	return c, nil
}

// Check asks whether req may happen now; it counts nothing.
func (c *Client) Check(ctx context.Context, req limitapi.Request) (limitapi.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r := connect.NewRequest(&floodgatev1.CheckRequest{Action: validUTF8(req.Action), Subjects: limitapi.SubjectsToProto(req.Subjects), Exact: req.Exact})
	c.auth(r.Header())
	res, err := c.rpc.Check(ctx, r)
	if err != nil {
		return limitapi.Decision{}, wrap("check", req.Action, err)
	}
	m := res.Msg
	return limitapi.DecisionFromProto(&floodgatev1.TakeResponse{
		Allowed: m.Allowed, Denial: m.Denial, Limits: m.Limits, ShadowDenials: m.ShadowDenials, Degraded: m.Degraded,
	}, time.Now()), nil
}

// Take checks and counts req (strict mode; see limitapi.Limiter.Take).
func (c *Client) Take(ctx context.Context, req limitapi.Request) (limitapi.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r := connect.NewRequest(&floodgatev1.TakeRequest{Action: validUTF8(req.Action), Subjects: limitapi.SubjectsToProto(req.Subjects), N: req.N, Id: validUTF8(req.ID)})
	c.auth(r.Header())
	res, err := c.rpc.Take(ctx, r)
	if err != nil {
		return limitapi.Decision{}, wrap("take", req.Action, err)
	}
	return limitapi.DecisionFromProto(res.Msg, time.Now()), nil
}

// wrap words a failed call; a request the limiter refused as invalid
// matches limitapi.ErrRefused.
func wrap(op, action string, err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeResourceExhausted:
		return fmt.Errorf("limiter %s %s: %w: %w", op, action, limitapi.ErrRefused, err)
	}
	return fmt.Errorf("limiter %s %s: %w", op, action, err)
}

func (c *Client) auth(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
}

// validUTF8 keeps a request marshalable: proto3 refuses invalid UTF-8, and
// a request that cannot be sent is no answer (a pass, to a fail-open
// caller); with the bytes replaced the limiter refuses the bad value itself.
func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
