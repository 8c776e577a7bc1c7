package decide_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/limiter/limiterclient"
	"github.com/floodgate-dev/floodgate/limiter/limitermw"
)

// The Go client and the net/http middleware against a served limiter: the
// middleware refuses a denied client with 429 and the headers, serves the
// others, and publishes the access event of the requests it lets through.
func TestClientAndMiddleware(t *testing.T) {
	e := newEnv(t, func(_ *decide.Config, s *decide.ServerConfig) { s.AuthToken = "tok" })
	e.apply(t, "login_failed", "ip", "203.0.113.50", 6, time.Now())

	for _, proto := range []string{"grpc", "connect"} {
		c, err := limiterclient.New(limiterclient.Config{BaseURL: "http://" + e.srv.HTTPAddr(), Protocol: proto, Token: "tok", Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		d, err := c.Check(context.Background(), decide.Request{Action: "login_failed", Subjects: []decide.Subject{{Kind: "ip", Subject: "203.0.113.50"}}})
		if err != nil || d.Allowed || d.Denial.Rule != "login-failed" || d.RetryAfter() < 50*time.Second {
			t.Errorf("%s client check: %+v %v", proto, d, err)
		}
		d, err = c.Take(context.Background(), decide.Request{Action: "password_reset", Subjects: []decide.Subject{{Kind: "email", Subject: proto + "@example.com"}}})
		if err != nil || !d.Allowed || !d.Counted {
			t.Errorf("%s client take: %+v %v", proto, d, err)
		}
	}
	bad, err := limiterclient.New(limiterclient.Config{BaseURL: "http://" + e.srv.HTTPAddr(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Check(context.Background(), decide.Request{Action: "login_failed", Subjects: []decide.Subject{{Kind: "ip", Subject: "1"}}}); err == nil || !strings.Contains(err.Error(), "unauthenticated") {
		t.Errorf("client without token: %v", err)
	}

	c, err := limiterclient.New(limiterclient.Config{BaseURL: "http://" + e.srv.HTTPAddr(), Token: "tok", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pub := &recorder{}
	mw, err := limitermw.New(limitermw.Config{
		Checker: c, Action: "login_failed", Publisher: pub,
		Subjects: func(r *http.Request) []decide.Subject {
			return []decide.Subject{{Kind: "ip", Subject: r.Header.Get("X-Real-IP")}, {Kind: "email", Subject: r.URL.Query().Get("email")}}
		},
		Publish: func(_ *http.Request, status int) bool { return status == http.StatusUnauthorized },
	})
	if err != nil {
		t.Fatal(err)
	}
	app := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad password", http.StatusUnauthorized)
	})))
	defer app.Close()
	get := func(ip, email string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, app.URL+"/login?email="+email, nil)
		req.Header.Set("X-Real-IP", ip)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp
	}
	if resp := get("203.0.113.50", "a@example.com"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit-Policy") == "" {
		t.Errorf("denied client: %d %v", resp.StatusCode, resp.Header)
	}
	// A fresh subject is answered from memory: under half of 5/1m, at
	// least 3 are left (never more than what is left).
	if resp := get("198.51.100.77", "b@example.com"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("RateLimit"), `"login-failed/ip/1m";r=3`) {
		t.Errorf("allowed client: %d %v", resp.StatusCode, resp.Header)
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	kinds := map[string]string{}
	for _, ev := range pub.plain {
		if ev.Action == "login_failed" {
			kinds[ev.Kind] = ev.Subject
		}
	}
	if len(pub.plain) != 2 || kinds["email"] != "b@example.com" || kinds["ip"] != "198.51.100.77" {
		t.Errorf("published %+v, want the allowed request's email and ip events", pub.plain)
	}
}
