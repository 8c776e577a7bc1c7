package operator_test

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// The admin endpoints' cost is bounded by the request's size: the largest
// request each accepts (a 64 KiB form to ban, an 8 KiB query to inspect),
// all of it subjects, is refused before any subject is looked at (more than
// operator.MaxSubjects), allocating at most 32 bytes per request byte (the
// form's parse, the server's work and the test client's) and answering far
// fewer bytes than it was sent. Before, every subject was checked against
// all those kept before it (a quadratic scan) before the bound refused it:
// quadratic in what was sent, though at 64 KiB not enough to fail this test.
func TestAdminRequestCostIsBoundedByItsSize(t *testing.T) {
	rdb := stacktest.Redis(t)
	e := newEnv(t, rdb, stacktest.Prefix(t, rdb))
	tokens, err := operator.ParseTokens([]string{"alice=" + aliceSecret})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := operator.NewServer(operator.ServerConfig{Operator: e.op, Tokens: tokens, Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	fill := func(size int) string {
		var b strings.Builder
		b.WriteString("action=login_failed")
		for i := 0; ; i++ {
			p := "&ip=10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
			if b.Len()+len(p) > size {
				return b.String()
			}
			b.WriteString(p)
		}
	}
	for _, tc := range []struct {
		method, path string
		size         int
	}{
		{http.MethodPost, "ban", decide.DefaultMaxRequestBytes - 256},
		{http.MethodGet, "inspect", 8<<10 - 16},
	} {
		q := fill(tc.size)
		var code, out int
		var body []byte
		alloc := ^uint64(0)
		for run := range 6 { // the fewest of five after a first call (caches, pools)
			var r *http.Request
			if tc.method == http.MethodPost {
				r, err = http.NewRequest(tc.method, "http://"+srv.Addr()+"/v1/admin/"+tc.path, strings.NewReader(q))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			} else {
				r, err = http.NewRequest(tc.method, "http://"+srv.Addr()+"/v1/admin/"+tc.path+"?"+q, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			r.Header.Set("Authorization", "Bearer "+aliceSecret)
			if tc.path == "ban" {
				r.Header.Set(operator.HeaderFor, "1h")
			}
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			body, err = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&m1)
			if run > 0 {
				alloc = min(alloc, m1.TotalAlloc-m0.TotalAlloc)
			}
			code, out = resp.StatusCode, len(body)
		}
		n := strings.Count(q, "&ip=")
		t.Logf("%s %s of %d subjects: %d bytes in, %d out, %d allocated (%.1f a byte)", tc.method, tc.path, n, len(q), out, alloc, float64(alloc)/float64(len(q)))
		if code != http.StatusBadRequest || !strings.Contains(string(body), strconv.Itoa(n)+" subjects, at most 16") {
			t.Errorf("%s %s of %d subjects: %d %s, want 400 naming the bound", tc.method, tc.path, n, code, body)
		}
		if alloc > uint64(32*len(q)) || out > len(q) {
			t.Errorf("%s %s of %d bytes: %d bytes allocated, %d answered; want at most 32 a byte and fewer than sent", tc.method, tc.path, len(q), alloc, out)
		}
	}
}
