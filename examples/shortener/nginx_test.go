package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
)

// nginxConf is docs/integrate.md's auth_request configuration in front of
// the shortener. The test's clients name themselves in X-Forwarded-For,
// which nginx trusts from loopback (realip), as behind a load balancer.
var nginxConf = template.Must(template.New("nginx.conf").Parse(`
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

    server {
        listen {{.Listen}};

        # Link creation: the shortener takes (strict rule) itself.
        location = /links {
            proxy_pass http://{{.Shortener}};
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }
        # Visits: checked by floodgate before they reach the shortener.
        location / {
            auth_request /_floodgate;
            auth_request_set $fg_retry $upstream_http_retry_after;
            error_page 403 = @limited;
            proxy_pass http://{{.Shortener}};
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }
        location = /_floodgate {
            internal;
            proxy_pass http://{{.Limiter}}/v1/check?action=visit&ip=$remote_addr;
            # The client's headers stay here: Floodgate-* ones are the
            # limiter's settings (Floodgate-Exact: 1 sends every check to
            # Redis).
            proxy_pass_request_headers off;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header Floodgate-Deny-Status 403;
        }
        location @limited {
            add_header Retry-After $fg_retry always;
            return 429 "Too many requests\n";
        }
    }
}
`))

// startNginx runs Debian's nginx as a private process (its own prefix
// directory, config, logs and port) until the test ends.
func startNginx(t *testing.T, shortener, limiter string) string {
	t.Helper()
	dir := t.TempDir()
	listen := servicetest.FreeAddr(t)
	f, err := os.Create(filepath.Join(dir, "nginx.conf"))
	if err != nil {
		t.Fatal(err)
	}
	err = nginxConf.Execute(f, map[string]string{"Dir": dir, "Listen": listen, "Shortener": shortener, "Limiter": limiter})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	stacktest.RunNginx(t, dir, listen)
	return "http://" + listen
}

// Debian's nginx in front of the shortener, asking floodgate with
// auth_request: a client over the visit limit gets nginx's 429 with
// Retry-After, others still get their redirect.
func TestNginxAuthRequest(t *testing.T) {
	s := newStack(t, CLI{TrustedProxies: []string{"127.0.0.1/32"}})
	servicetest.Aggregator(t, servicetest.Build(t, servicetest.Floodgate), s.st, "--no-history")
	front := startNginx(t, strings.TrimPrefix(s.shortener, "http://"), s.limiter.Addr)

	a := createLink(t, front, "https://example.com/behind/nginx", "192.0.2.20")
	code, _ := a.body["code"].(string)
	if a.status != http.StatusCreated || code == "" {
		t.Fatalf("create through nginx: %d %s", a.status, a.raw)
	}
	visit := func(ip string) answer {
		return send(t, "GET", front+"/"+code, "", "", map[string]string{"X-Forwarded-For": ip})
	}
	// The rule allows 5 visits a minute per IP; the aggregator counts them
	// a moment after they happen, so a few more may pass before the deny.
	var last answer
	deadline := time.Now().Add(30 * time.Second)
	for n := 1; ; n++ {
		last = visit("198.51.100.9")
		if last.status == http.StatusTooManyRequests && last.body == nil {
			t.Logf("denied by nginx at visit %d", n)
			break
		}
		// The shortener checks too: when the deny lands between nginx's
		// check and its own, its JSON 429 comes through nginx. The next
		// request meets the deny in nginx.
		if last.status == http.StatusTooManyRequests && last.body["rule"] == "link-visit" {
			continue
		}
		if last.status != http.StatusFound {
			t.Fatalf("visit %d: %d %s", n, last.status, last.raw)
		}
		if time.Now().After(deadline) {
			t.Fatalf("still admitted after %d visits in 30s", n)
		}
	}
	retry, err := strconv.Atoi(last.header.Get("Retry-After"))
	if err != nil || retry < 1 || retry > 60 || last.raw != "Too many requests\n" || !strings.HasPrefix(last.header.Get("Server"), "nginx") {
		t.Errorf("denied answer: %d Server %q Retry-After %q body %q; want nginx's 429 with Retry-After 1..60",
			last.status, last.header.Get("Server"), last.header.Get("Retry-After"), last.raw)
	}
	if other := visit("198.51.100.10"); other.status != http.StatusFound {
		t.Errorf("another client: %d %s, want 302", other.status, other.raw)
	}
	// A client's Floodgate-* headers never reach the limiter: there a bad
	// Floodgate-Exact or a Floodgate-N on a check is a 400, which nginx
	// would answer 500; a Floodgate-Deny-Status of the client's is not the
	// status nginx maps.
	forged := send(t, "GET", front+"/"+code, "", "", map[string]string{"X-Forwarded-For": "198.51.100.11",
		"Floodgate-Exact": "bogus", "Floodgate-N": "5", "Floodgate-Event-Id": "fixed", "Floodgate-Deny-Status": "200"})
	if forged.status != http.StatusFound {
		t.Errorf("a client with Floodgate-* headers: %d %s, want 302 (the headers stripped)", forged.status, forged.raw)
	}
	if again := visit("198.51.100.9"); again.status != http.StatusTooManyRequests {
		t.Errorf("the denied client again: %d %s, want 429", again.status, again.raw)
	}
}
