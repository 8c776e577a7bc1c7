package operator_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// loggedOperator is an Operator over e's store whose log the test reads.
func loggedOperator(t *testing.T, e *env, pseudonym func(string) string) (*operator.Operator, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	writer, err := operator.NewWriter(e.store)
	if err != nil {
		t.Fatal(err)
	}
	op, err := operator.New(operator.Config{Store: e.store, Writer: writer, Rules: func() *rules.Set { return e.set },
		Pseudonym: pseudonym, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return op, &buf
}

// A reset is how a subject is erased: its log line names the subject by
// its digest (or the pseudonym given, as erase gives history's keyed
// hash), never as given. A ban's line names it: its audit does anyway.
func TestResetLogsNoSubject(t *testing.T) {
	rdb := stacktest.Redis(t)
	e := newEnv(t, rdb, stacktest.Prefix(t, rdb))
	ctx := context.Background()
	const subject = "erase-me@example.com"

	op, log := loggedOperator(t, e, nil)
	if _, err := op.Reset(ctx, req("login_failed", "email", subject)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), subject) || !strings.Contains(log.String(), `"subject":"`+event.Digest(subject)+`"`) {
		t.Errorf("reset logged %s; want the subject's digest %s, not the subject", log, event.Digest(subject))
	}

	op, log = loggedOperator(t, e, func(s string) string { return "~h:keyed-" + s[:3] })
	if _, err := op.Reset(ctx, req("login_failed", "email", subject)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), subject) || !strings.Contains(log.String(), `"subject":"~h:keyed-era"`) {
		t.Errorf("reset with a pseudonym logged %s", log)
	}

	op, log = loggedOperator(t, e, nil)
	r := req("login_failed", "ip", "203.0.113.90")
	r.For, r.Message = time.Minute, "ticket 9"
	if _, err := op.Ban(ctx, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), `"subject":"203.0.113.90"`) {
		t.Errorf("ban logged %s; want the subject", log)
	}
}

// The profiler's /debug/pprof/cmdline is not served, even to an admin
// token: the command line may hold secrets. The profiles are.
func TestAdminServesNoCommandLine(t *testing.T) {
	rdb := stacktest.Redis(t)
	e := newEnv(t, rdb, stacktest.Prefix(t, rdb))
	tokens, err := operator.ParseTokens([]string{"alice=" + aliceSecret})
	if err != nil {
		t.Fatal(err)
	}
	h, err := operator.NewHandler(e.op, tokens, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		rq, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		rq.Header.Set("Authorization", "Bearer "+aliceSecret)
		resp, err := http.DefaultClient.Do(rq)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/debug/pprof/cmdline"); code != http.StatusNotFound || strings.Contains(body, "operator.test") {
		t.Errorf("/debug/pprof/cmdline with an admin token: %d %.120q; want 404 and no command line", code, body)
	}
	if code, body := get("/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Errorf("/debug/pprof/goroutine with an admin token: %d %.80q", code, body)
	}
}

// A token spec without "=" may be a bare secret: the error says which
// spec, and shows no byte of it.
func TestParseTokensShowsNoSecret(t *testing.T) {
	const secret = "Zq9wXk2LmN4pR7sT"
	_, err := operator.ParseTokens([]string{"alice=" + aliceSecret, secret})
	if err == nil {
		t.Fatal("a spec without a name accepted")
	}
	for n := 3; n <= len(secret); n++ {
		if strings.Contains(err.Error(), secret[:n]) {
			t.Fatalf("error %q shows %d bytes of the secret", err, n)
		}
	}
	if !strings.Contains(err.Error(), "admin token 2 of 2") {
		t.Errorf("error %q does not say which spec", err)
	}
}
