package limitermw_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/limiter/limitapi"
	"github.com/floodgate-dev/floodgate/limiter/limitermw"
)

// A login route behind the limiter: a subject it denies gets 429 with
// Retry-After and the RateLimit fields, and the handler never runs. (The
// checker here is a stand-in that denies one e-mail; a
// *limiterclient.Client asks the real limiter.)
func Example() {
	mw, err := limitermw.New(limitermw.Config{
		Checker: denyEmail("victim@x.example"),
		Action:  "login_failed",
		Subjects: func(r *http.Request) []limitapi.Subject {
			email := strings.ToLower(strings.TrimSpace(r.FormValue("email")))
			return []limitapi.Subject{{Kind: "ip", Subject: limitermw.ClientIP(r)}, {Kind: "email", Subject: email}}
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	login := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "checking the password")
	}))
	for _, email := range []string{"alice@x.example", "VICTIM@x.example"} {
		r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"email": {email}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		login.ServeHTTP(w, r)
		fmt.Println(email, w.Code, strings.TrimSpace("retry-after="+w.Header().Get("Retry-After")))
	}
	// Output:
	// alice@x.example 200 retry-after=
	// VICTIM@x.example 429 retry-after=30
}

// denyEmail is a checker that denies one e-mail for 30 s.
type denyEmail string

func (d denyEmail) Check(_ context.Context, req limitapi.Request) (limitapi.Decision, error) {
	for _, s := range req.Subjects {
		if s.Kind == "email" && s.Subject == string(d) {
			return limitapi.Decision{Denial: &limitapi.Denial{
				Rule: "login-failed", Kind: s.Kind, Subject: s.Subject, Limit: 5, Window: time.Minute,
				RetryAfter: 30 * time.Second, Message: "Too many failed logins.",
			}}, nil
		}
	}
	return limitapi.Decision{Allowed: true}, nil
}
