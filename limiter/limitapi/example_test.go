package limitapi_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// A denial is answered with the IETF RateLimit header fields.
func ExampleSetHeaders() {
	d := limitapi.Decision{
		Denial: &limitapi.Denial{Rule: "login-failed", Kind: "ip", Subject: "203.0.113.7", Limit: 5, Window: time.Minute,
			Count: 6, RetryAfter: 41500 * time.Millisecond},
		Limits: []limitapi.Limit{
			{Rule: "login-failed", Kind: "ip", Limit: 5, Window: time.Minute, Count: 6, Exceeded: true, ResetAfter: 41500 * time.Millisecond},
			{Rule: "login-failed", Kind: "ip", Limit: 10, Window: time.Hour, Count: 6, Remaining: 4, ResetAfter: time.Hour},
		},
	}
	h := http.Header{}
	limitapi.SetHeaders(h, d)
	fmt.Println("RateLimit-Policy:", h.Get("RateLimit-Policy"))
	fmt.Println("RateLimit:", h.Get("RateLimit"))
	fmt.Println("Retry-After:", h.Get("Retry-After"))
	// Output:
	// RateLimit-Policy: "login-failed/ip/1m";q=5;w=60, "login-failed/ip/1h";q=10;w=3600
	// RateLimit: "login-failed/ip/1m";r=0;t=42, "login-failed/ip/1h";r=4;t=3600
	// Retry-After: 42
}
