package limiter

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

	"floodgate/rules"
)

// HeaderDenyStatus lets a caller choose the status of a denial on the HTTP
// surface: 429 (default), 403 or 401. nginx's auth_request turns any status
// but 2xx, 401 and 403 into a 500, so an nginx location sets it to 403.
const HeaderDenyStatus = "Floodgate-Deny-Status"

// maxQueryBytes bounds the query string of /v1/check and /v1/take.
const maxQueryBytes = 8 << 10

// CheckResult is the JSON body of /v1/check and /v1/take: the decision,
// with the denial's fields at the top level so that a proxy can show
// "message" as it is. Windows are in the rules file syntax ("1m"), times in
// whole seconds.
type CheckResult struct {
	Allowed       bool         `json:"allowed"`
	Message       string       `json:"message,omitempty"`
	Rule          string       `json:"rule,omitempty"`
	Kind          string       `json:"kind,omitempty"`
	Subject       string       `json:"subject,omitempty"`
	Limit         int64        `json:"limit,omitempty"`
	Window        string       `json:"window,omitempty"`
	Count         int64        `json:"count,omitempty"`
	RetryAfter    int64        `json:"retry_after,omitempty"`
	Degraded      bool         `json:"degraded,omitempty"`
	Cached        bool         `json:"cached,omitempty"`
	Counted       bool         `json:"counted,omitempty"`
	Limits        []LimitJSON  `json:"limits,omitempty"`
	ShadowDenials []DenialJSON `json:"shadow_denials,omitempty"`
	Error         string       `json:"error,omitempty"`
}

// LimitJSON is a Limit in CheckResult.
type LimitJSON struct {
	Rule        string `json:"rule"`
	Kind        string `json:"kind"`
	Subject     string `json:"subject"`
	Limit       int64  `json:"limit"`
	Window      string `json:"window"`
	Count       int64  `json:"count"`
	Remaining   int64  `json:"remaining"`
	ResetAfter  int64  `json:"reset_after"`
	Shadow      bool   `json:"shadow,omitempty"`
	Strict      bool   `json:"strict,omitempty"`
	Exceeded    bool   `json:"exceeded,omitempty"`
	Allowlisted bool   `json:"allowlisted,omitempty"`
}

// DenialJSON is a shadow denial in CheckResult.
type DenialJSON struct {
	Rule       string `json:"rule"`
	Kind       string `json:"kind"`
	Subject    string `json:"subject"`
	Limit      int64  `json:"limit"`
	Window     string `json:"window"`
	Count      int64  `json:"count"`
	Message    string `json:"message,omitempty"`
	RetryAfter int64  `json:"retry_after"`
}

// Result converts a decision to its JSON body.
func Result(d Decision) CheckResult {
	r := CheckResult{Allowed: d.Allowed, Degraded: d.Degraded, Cached: d.Cached, Counted: d.Counted}
	if den := d.Denial; den != nil {
		r.Message, r.Rule, r.Kind, r.Subject = den.Message, den.Rule, den.Kind, den.Subject
		r.Limit, r.Count, r.RetryAfter = den.Limit, den.Count, max(retrySeconds(den.RetryAfter), 1)
		if den.Window > 0 {
			r.Window = rules.FormatWindow(den.Window)
		}
	}
	for _, l := range d.Limits {
		r.Limits = append(r.Limits, LimitJSON{
			Rule: l.Rule, Kind: l.Kind, Subject: l.Subject, Limit: l.Limit, Window: rules.FormatWindow(l.Window),
			Count: l.Count, Remaining: l.Remaining, ResetAfter: retrySeconds(l.ResetAfter),
			Shadow: l.Shadow, Strict: l.Strict, Exceeded: l.Exceeded, Allowlisted: l.Allowlisted,
		})
	}
	for _, s := range d.ShadowDenials {
		r.ShadowDenials = append(r.ShadowDenials, DenialJSON{
			Rule: s.Rule, Kind: s.Kind, Subject: s.Subject, Limit: s.Limit, Window: rules.FormatWindow(s.Window),
			Count: s.Count, Message: s.Message, RetryAfter: retrySeconds(s.RetryAfter),
		})
	}
	return r
}

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
	SetHeaders(w.Header(), d)
	status := http.StatusOK
	outcome := "ok"
	if !d.Allowed {
		outcome = "over_limit"
		status = http.StatusTooManyRequests
		switch r.Header.Get(HeaderDenyStatus) {
		case "403":
			status = http.StatusForbidden
		case "401":
			status = http.StatusUnauthorized
		}
	}
	h.l.m.requests.WithLabelValues(surface, outcome).Inc()
	writeJSON(w, status, Result(d))
}

func (h *httpHandler) fail(w http.ResponseWriter, surface string, status int, msg string) {
	outcome := "invalid"
	if status >= 500 {
		outcome = "error"
	}
	h.l.m.requests.WithLabelValues(surface, outcome).Inc()
	writeJSON(w, status, CheckResult{Allowed: false, Error: msg, Message: msg})
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
			writeJSON(w, http.StatusUnauthorized, CheckResult{Error: "missing or wrong bearer token", Message: "unauthenticated"})
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

// healthHandlers serves /healthz (the process runs) and /readyz (rules
// loaded and Redis answering).
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
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	}
}
