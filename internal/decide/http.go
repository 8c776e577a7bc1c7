package decide

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// maxQueryBytes bounds the query string of /v1/check and /v1/take.
const maxQueryBytes = 8 << 10

// httpHandler serves GET /v1/check and POST /v1/take.
type httpHandler struct {
	l        *Limiter
	take     bool
	maxBytes int64
}

// ParseQuery reads a check from URL parameters: "action" names the action
// and every other parameter is a kind with its subject (repeatable: ip=a&ip=b
// checks two IPs). Empty values are skipped, so a proxy may pass a header
// that is absent. Subjects are ordered by kind.
func ParseQuery(q url.Values) (Request, error) {
	var req Request
	acts := q["action"]
	switch {
	case len(acts) == 0 || acts[0] == "":
		return req, invalidf("action is required: /v1/check?action=login_failed&ip=203.0.113.7")
	case len(acts) > 1:
		return req, invalidf("action given %d times, want once", len(acts))
	}
	req.Action = acts[0]
	kinds := make([]string, 0, len(q))
	for k := range q {
		if k != "action" {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		for _, v := range q[k] {
			if v != "" {
				req.Subjects = append(req.Subjects, Subject{Kind: k, Subject: v})
			}
		}
	}
	return req, nil
}

func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	surface := "http"
	defer h.l.m.observe(surface, time.Now())
	if h.take {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			h.fail(w, surface, http.StatusMethodNotAllowed, "use POST for /v1/take")
			return
		}
	} else if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, HEAD, POST")
		h.fail(w, surface, http.StatusMethodNotAllowed, "use GET for /v1/check")
		return
	}
	if len(r.URL.RawQuery) > maxQueryBytes {
		h.fail(w, surface, http.StatusRequestURITooLong, "query longer than "+strconv.Itoa(maxQueryBytes)+" bytes")
		return
	}
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, h.maxBytes)
		if err := r.ParseForm(); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				h.fail(w, surface, http.StatusRequestEntityTooLarge, "body larger than "+strconv.FormatInt(h.maxBytes, 10)+" bytes")
				return
			}
			h.fail(w, surface, http.StatusBadRequest, "bad form: "+err.Error())
			return
		}
	} else {
		r.Form = r.URL.Query()
	}
	req, err := ParseQuery(r.Form)
	if err == nil {
		err = requestHeaders(r.Header, &req, h.take)
	}
	var d Decision
	if err == nil {
		if h.take {
			d, err = h.l.Take(r.Context(), req)
		} else {
			d, err = h.l.Check(r.Context(), req)
		}
	}
	if err != nil {
		code := http.StatusBadRequest
		if ErrorCode(err) == 0 {
			code = http.StatusInternalServerError
		}
		h.fail(w, surface, code, err.Error())
		return
	}
	limitapi.SetHeaders(w.Header(), d)
	status := http.StatusOK
	outcome := "ok"
	if !d.Allowed {
		outcome = "over_limit"
		status = http.StatusTooManyRequests
		switch r.Header.Get(limitapi.HeaderDenyStatus) {
		case "403":
			status = http.StatusForbidden
		case "401":
			status = http.StatusUnauthorized
		}
	}
	h.l.m.requests.WithLabelValues(surface, outcome).Inc()
	writeJSON(w, status, limitapi.Result(d))
}

// requestHeaders reads the request's settings: n and the event id of a
// take, exact for a check.
func requestHeaders(hd http.Header, req *Request, take bool) error {
	if v := hd.Get(limitapi.HeaderN); v != "" {
		if !take {
			return invalidf("%s applies to /v1/take only", limitapi.HeaderN)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return invalidf("%s: %q is not a whole number >= 1", limitapi.HeaderN, v)
		}
		req.N = n
	}
	if v := hd.Get(limitapi.HeaderEventID); v != "" && take {
		req.ID = v
	}
	switch v := hd.Get(limitapi.HeaderExact); v {
	case "", "0", "false":
	case "1", "true":
		req.Exact = true
	default:
		return invalidf("%s: %q, want 1 or 0", limitapi.HeaderExact, v)
	}
	return nil
}

func (h *httpHandler) fail(w http.ResponseWriter, surface string, status int, msg string) {
	outcome := "invalid"
	if status >= 500 {
		outcome = "error"
	}
	h.l.m.requests.WithLabelValues(surface, outcome).Inc()
	writeJSON(w, status, limitapi.CheckResult{Allowed: false, Error: msg, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}

// bearerAuth requires "Authorization: Bearer <token>" on next.
func bearerAuth(token string, m *metrics, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !tokenOK(token, r.Header.Get("Authorization")) {
			m.requests.WithLabelValues("http", "unauthenticated").Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate"`)
			writeJSON(w, http.StatusUnauthorized, limitapi.CheckResult{Error: "missing or wrong bearer token", Message: "unauthenticated"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// tokenOK compares "Bearer <token>" in constant time.
func tokenOK(token, header string) bool {
	const p = "bearer "
	if len(header) < len(p) || !strings.EqualFold(header[:len(p)], p) {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(header[len(p):])), []byte(token)) == 1
}

// healthz serves /healthz (the process runs); readyz serves /readyz (rules
// loaded and the state, or Redis, answering).
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok\n"))
}

func readyz(l *Limiter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain")
		if err := l.Ready(ctx); err != nil {
			// The dependency only: the error's detail names internal
			// addresses, which are the log's to show.
			msg := "not ready"
			var nr *NotReadyError
			if errors.As(err, &nr) {
				msg += ": " + nr.Dependency
			}
			l.log.Warn("limiter: not ready", "err", err)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(msg + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	}
}
