package adminapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// BaseURL of a limiter's admin listener, e.g. "https://10.0.0.5:8082".
	// Required.
	BaseURL string
	// Token is the secret of an admin token (the limiter's --admin-token
	// name=secret): the audit names that token's operator. Required.
	Token string
	// TLS is how to reach an https BaseURL (its CA, a client certificate).
	TLS *tls.Config
	// HTTPClient replaces the default client (which follows no redirect).
	HTTPClient *http.Client
}

// Client runs the operator controls through a limiter's admin endpoints.
// Its methods answer as package operator's do, with the same types, so a
// tool prints the same either way. Safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
}

// maxAnswerBytes bounds what is read of an answer: an inspection of 16
// subjects is a few KiB.
const maxAnswerBytes = 4 << 20

// NewClient validates cfg and returns a Client.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	switch {
	case cfg.BaseURL == "":
		return nil, errors.New("admin client: the admin URL is required")
	case err != nil:
		return nil, fmt.Errorf("admin client: admin URL: %w", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("admin client: admin URL %q: want http:// or https://", cfg.BaseURL)
	case u.Host == "":
		return nil, fmt.Errorf("admin client: admin URL %q has no host", cfg.BaseURL)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("admin client: admin URL %q: give only scheme, host and path", u.Redacted())
	case cfg.Token == "":
		return nil, errors.New("admin client: an admin token is required")
	case strings.ContainsAny(cfg.Token, " \t\r\n"):
		return nil, errors.New("admin client: the admin token holds whitespace")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = cfg.TLS
		// A redirect would carry the token to wherever it points; the admin
		// endpoints never redirect.
		hc = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &Client{base: u, token: cfg.Token, hc: hc}, nil
}

// Error is an answer of the admin endpoints other than 200: its status and
// the server's message.
type Error struct {
	Status int    // HTTP status: 400 a bad request, 401 a missing or wrong token...
	Msg    string // the server's message
}

func (e *Error) Error() string {
	msg := e.Msg
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	switch e.Status {
	case http.StatusUnauthorized:
		return fmt.Sprintf("admin API refused the token (401): %s", msg)
	case http.StatusForbidden:
		return fmt.Sprintf("admin API forbids it (403): %s", msg)
	case http.StatusNotFound:
		return fmt.Sprintf("admin API: no such endpoint (404; is the URL a limiter's --admin-addr?): %s", msg)
	}
	if e.Status >= 500 {
		return fmt.Sprintf("admin API failed (%d): %s", e.Status, msg)
	}
	return fmt.Sprintf("admin API refused the request (%d): %s", e.Status, msg)
}

// IsInvalid says whether err is the server's refusal of a bad request
// (400): retrying it unchanged fails again.
func IsInvalid(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusBadRequest
}

// Inspect reads everything about req's subjects (GET /v1/admin/inspect).
func (c *Client) Inspect(ctx context.Context, req Request) (Inspection, error) {
	var in Inspection
	_, err := c.do(ctx, http.MethodGet, "inspect", req, &in)
	return in, err
}

// Ban denies req's subjects for req.For whatever their counts.
func (c *Client) Ban(ctx context.Context, req Request) (Result, error) {
	return c.write(ctx, "ban", req)
}

// Unban clears req's subjects' deny and shadow records, bans and decision
// state (with req.Rule, only that rule's).
func (c *Client) Unban(ctx context.Context, req Request) (Result, error) {
	return c.write(ctx, "unban", req)
}

// Reset unbans req's subjects and deletes their counters.
func (c *Client) Reset(ctx context.Context, req Request) (Result, error) {
	return c.write(ctx, "reset", req)
}

// write runs one write; on an error the result holds the subjects the
// server changed before it.
func (c *Client) write(ctx context.Context, op string, req Request) (Result, error) {
	var res Result
	done, err := c.do(ctx, http.MethodPost, op, req, &res)
	if err != nil && done != nil {
		return *done, err
	}
	return res, err
}

// do sends one request. req.Operator is not sent: the server records the
// name of the token.
func (c *Client) do(ctx context.Context, method, op string, req Request, out any) (*Result, error) {
	q := url.Values{"action": {req.Action}}
	for _, s := range req.Subjects {
		if s.Kind == "action" {
			return nil, fmt.Errorf("%s: a subject's kind cannot be %q", op, s.Kind)
		}
		q.Add(s.Kind, s.Subject)
	}
	u := *c.base
	u.Path += "/v1/admin/" + op
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(q.Encode()) // subjects stay out of access logs
	} else {
		u.RawQuery = q.Encode()
	}
	r, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if body != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	r.Header.Set("Authorization", "Bearer "+c.token)
	r.Header.Set("Accept", "application/json")
	if req.Rule != "" {
		r.Header.Set(HeaderRule, req.Rule)
	}
	if req.For != 0 {
		r.Header.Set(HeaderFor, formatFor(req.For))
	}
	if req.Message != "" {
		r.Header.Set(HeaderMessage, req.Message)
	}
	resp, err := c.hc.Do(r)
	if err != nil {
		// The URL is named once, without the subjects of the query.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s through %s: %w", op, c.base.Redacted(), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s through %s: read the answer: %w", op, c.base.Redacted(), err)
	}
	if len(b) > maxAnswerBytes {
		return nil, fmt.Errorf("%s through %s: answer larger than %d bytes", op, c.base.Redacted(), maxAnswerBytes)
	}
	if resp.StatusCode != http.StatusOK {
		var eb struct {
			Error string  `json:"error"`
			Done  *Result `json:"done"`
		}
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
			eb.Error = strings.TrimSpace(string(bytes.ToValidUTF8(b[:min(len(b), 512)], []byte("?"))))
		}
		return eb.Done, fmt.Errorf("%s: %w", op, &Error{Status: resp.StatusCode, Msg: eb.Error})
	}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("%s through %s: decode the answer: %w", op, c.base.Redacted(), err)
	}
	return nil, nil
}

// formatFor writes a ban's duration as the admin endpoint reads it: whole
// days as "2d", anything else in Go's syntax.
func formatFor(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}
