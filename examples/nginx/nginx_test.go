// Package nginx_test runs examples/nginx/floodgate-take.conf as written in
// Debian's nginx, in front of a site that publishes nothing, against a
// real limiter and aggregator.
package nginx_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
)

const testRules = `
rules:
  - name: link-create
    action: link_create
    kinds: [ip]
    limits: [3/m]
    strict: true
    message: Too many new links.
  - name: link-visit
    action: visit
    kinds: [ip]
    limits: [5/m]
    message: Too many visits.
`

// mainConf wraps the example: the two upstream groups it names, and the
// test's clients naming themselves in X-Forwarded-For, trusted from
// loopback (realip), as behind a load balancer.
var mainConf = template.Must(template.New("nginx.conf").Parse(`
daemon off;
user root;
worker_processes 1;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log info;
events { worker_connections 256; }
http {
    access_log {{.Dir}}/access.log;
    client_body_temp_path {{.Dir}}/client_body;
    proxy_temp_path {{.Dir}}/proxy;
    fastcgi_temp_path {{.Dir}}/fastcgi;
    uwsgi_temp_path {{.Dir}}/uwsgi;
    scgi_temp_path {{.Dir}}/scgi;
    set_real_ip_from 127.0.0.1;
    real_ip_header X-Forwarded-For;
    upstream floodgate { server {{.Limiter}}; keepalive 16; }
    upstream site { server {{.Site}}; }
    server {
        listen {{.Listen}};
        include floodgate-take.conf;
    }
}
`))

// site is an application that publishes nothing: it counts what reaches it.
type site struct {
	mu   sync.Mutex
	hits map[string]int // "METHOD path ip"
}

func (s *site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.hits[r.Method+" "+r.URL.Path+" "+r.Header.Get("X-Real-Ip")]++
	s.mu.Unlock()
	_, _ = io.WriteString(w, "ok\n")
}

func (s *site) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[key]
}

// startNginx runs Debian's nginx as a private process (its own prefix
// directory holding the example's files, config, logs and port) until the
// test ends.
func startNginx(t *testing.T, limiter, site string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"floodgate-take.conf", "floodgate-take-params.conf"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	listen := servicetest.FreeAddr(t)
	var conf strings.Builder
	if err := mainConf.Execute(&conf, map[string]string{"Dir": dir, "Listen": listen, "Limiter": limiter, "Site": site}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	stacktest.RunNginx(t, dir, listen)
	return "http://" + listen
}

type answer struct {
	status int
	header http.Header
	body   string
}

func send(t *testing.T, method, url, ip string, hdr map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Forwarded-For", ip)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// checkLimited: nginx's own 429 with the limiter's Retry-After.
func checkLimited(t *testing.T, a answer, what string) {
	t.Helper()
	retry, err := strconv.Atoi(a.header.Get("Retry-After"))
	if a.status != http.StatusTooManyRequests || err != nil || retry < 1 || retry > 60 || a.body != "Too many requests\n" {
		t.Errorf("%s: %d Retry-After %q body %q; want nginx's 429 with Retry-After 1..60", what, a.status, a.header.Get("Retry-After"), a.body)
	}
}

// Debian's nginx with floodgate-take.conf in front of a site that
// publishes nothing: the limiter counts what nginx takes. A strict rule
// admits exactly its limit; a counted-by-the-aggregator rule denies a
// moment after its limit; headers a client sends to steer the take are
// not passed on.
func TestNginxTake(t *testing.T) {
	brokers := stacktest.Brokers(t)
	rdb := stacktest.Redis(t)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	st := servicetest.Stack{Brokers: brokers, RedisAddr: stacktest.RedisAddr(), Topic: stacktest.Topic(t, brokers, 1),
		Prefix: stacktest.Prefix(t, rdb), Rules: rules}
	bin := servicetest.Build(t, servicetest.Floodgate)
	lim := servicetest.Limiter(t, bin, st)
	servicetest.Aggregator(t, bin, st, "--no-history")
	app := &site{hits: map[string]int{}}
	appSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("X-Real-Ip", strings.TrimSpace(strings.Split(r.Header.Get("X-Forwarded-For"), ",")[0]))
		app.ServeHTTP(w, r)
	}))
	defer appSrv.Close()
	front := startNginx(t, lim.Addr, strings.TrimPrefix(appSrv.URL, "http://"))

	// Strict: 3 links a minute per IP, exactly.
	for i := 1; i <= 3; i++ {
		if a := send(t, "POST", front+"/links", "192.0.2.1", nil); a.status != http.StatusOK {
			t.Fatalf("link %d: %d %s", i, a.status, a.body)
		}
	}
	checkLimited(t, send(t, "POST", front+"/links", "192.0.2.1", nil), "4th link")
	if n := app.count("POST /links 192.0.2.1"); n != 3 {
		t.Errorf("the site got %d links, want 3", n)
	}

	// A client naming its own count, event id, exactness and deny status:
	// nginx sends none of them, so this is one ordinary take.
	steer := map[string]string{"Floodgate-N": "1000", "Floodgate-Exact": "bogus", "Floodgate-Event-Id": "x", "Floodgate-Deny-Status": "200"}
	if a := send(t, "POST", front+"/links", "192.0.2.2", steer); a.status != http.StatusOK {
		t.Fatalf("link with client Floodgate-* headers: %d %s, want 200 (headers stripped)", a.status, a.body)
	}
	for i := 2; i <= 3; i++ {
		if a := send(t, "POST", front+"/links", "192.0.2.2", nil); a.status != http.StatusOK {
			t.Fatalf("link %d after the steered one: %d %s", i, a.status, a.body)
		}
	}
	checkLimited(t, send(t, "POST", front+"/links", "192.0.2.2", steer), "4th link with client headers")

	// Visits: 5 a minute, counted by the aggregator from the limiter's
	// events, so a few more pass before the deny lands.
	var last answer
	n := 0
	stacktest.WaitFor(t, "a visit denied by nginx", 30*time.Second, func() bool {
		n++
		last = send(t, "GET", front+"/abc", "198.51.100.9", nil)
		if last.status != http.StatusOK && last.status != http.StatusTooManyRequests {
			t.Fatalf("visit %d: %d %s", n, last.status, last.body)
		}
		return last.status == http.StatusTooManyRequests
	})
	t.Logf("visits denied from visit %d", n)
	if n <= 5 {
		t.Errorf("denied at visit %d, within the limit of 5", n)
	}
	checkLimited(t, last, "visit over the limit")
	if a := send(t, "GET", front+"/abc", "198.51.100.10", nil); a.status != http.StatusOK {
		t.Errorf("another client: %d %s, want 200", a.status, a.body)
	}
}
