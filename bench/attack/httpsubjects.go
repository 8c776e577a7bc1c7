package attack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/internal/stacktest/promtext"
)

// allocMetric is the Go runtime's count of bytes allocated, which every
// floodgate process exports.
const allocMetric = "go_memstats_alloc_bytes_total"

// httpSubjects: one POST to /v1/check of a 64 KiB form of subjects, the
// first an IP over its limit, the rest fresh IPs. Every subject was decided
// before the 16-subject bound refused the request: 38 MiB allocated and an
// answer of 4 MB, 62 times the request.
func httpSubjects(ctx context.Context, e *env) (Row, error) {
	form := subjectsForm(requestBytes)
	n := strings.Count(form, "&ip=")
	row := Row{Tried: fmt.Sprintf("an IP over 2/h; one POST /v1/check of a %d-byte form (the cap is 64 KiB) of %d subjects, that IP first, the rest fresh IPs", len(form), n)}
	l, err := e.limiterWithDenied(ctx)
	if err != nil {
		return row, err
	}
	metrics := "http://" + l.http + "/metrics"
	allocated := func() (float64, error) {
		s, err := promtext.Scrape(ctx, metrics)
		if err != nil {
			return 0, err
		}
		return s.Sum(allocMetric), nil
	}
	a0, err := allocated()
	if err != nil {
		return row, err
	}
	var code, answer int
	var callErr error
	cost, err := callCPU(ctx, l.Pid(), func() { code, answer, callErr = postForm(ctx, "http://"+l.http+"/v1/check", form) })
	if err != nil {
		return row, err
	}
	a1, err := allocated()
	if err != nil {
		return row, err
	}
	// The scrapes' own allocations are in the figure: a few hundred KiB.
	perByte := (a1 - a0) / float64(len(form))
	row.Pass = callErr == nil && code == http.StatusTooManyRequests && answer <= len(form) && perByte <= 64 && cost.bounded(time.Second)
	row.Held = fmt.Sprintf("before (36c81e2): 429, 9.3 MiB allocated (149 bytes a request byte), an answer of 666359 bytes (10.21 of the request), 30ms CPU; after: %d, %s allocated (%.0f bytes a request byte, the /metrics scrapes included), "+
		"an answer of %d bytes (%.2f of the request), %s",
		code, fmt.Sprintf("%.1f MiB", (a1-a0)/(1<<20)), perByte, answer, float64(answer)/float64(len(form)), cost)
	if callErr != nil {
		row.Held += "; error: " + callErr.Error()
	}
	return row, nil
}

// subjectsForm is a login_failed form of deniedIP first and fresh IPs, as
// many as fit in size bytes.
func subjectsForm(size int) string {
	var b strings.Builder
	b.WriteString("action=login_failed&ip=" + deniedIP)
	for i := 0; ; i++ {
		p := "&ip=" + freshIP(i)
		if b.Len()+len(p) > size {
			return b.String()
		}
		b.WriteString(p)
	}
}

// postForm posts form to url and returns the status and the answer's size
// (header fields and body).
func postForm(ctx context.Context, url, form string) (int, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(form))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	n, err := io.Copy(io.Discard, resp.Body)
	for k, vs := range resp.Header {
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4)
		}
	}
	return resp.StatusCode, int(n), err
}
