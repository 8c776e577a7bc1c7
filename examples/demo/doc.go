// The demo, for people meeting floodgate for the first time. It starts the
// aggregator, the limiter, the roller and the dashboard as child processes
// of the floodgate binary, and the URL shortener of examples/shortener;
// creates short links through the shortener (a spammer runs into the strict
// link-creation rule and gets the shortener's 429), then drives the
// scenario: visits of those links as real HTTP requests (a few hot links,
// visitors named by X-Forwarded-For, the shortener trusting the demo as its
// proxy), a crawler caught by a shadow rule, and a credential-stuffing
// burst against failed logins published by "another app" (outside IPs
// stopped by the failed-login rule; an internal IP that rule allows, stopped
// by the distinct-e-mails rule credential-stuffing, which the demo waits
// for). It prints one
// status line a second and the first deny of each rule, shows a denial
// through the limiter's HTTP surface, and ends with a report — events
// produced against events counted in PostgreSQL, who was denied by which
// rule — and the dashboard loaded in headless Chromium, its totals and
// unique visitors (the aggregator counts visit=ip) compared with
// PostgreSQL. Every run uses its own topic and Redis key prefix.
package main
