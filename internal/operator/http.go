package operator

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/internal/adminapi"
	"github.com/floodgate-dev/floodgate/internal/decide"
	"github.com/floodgate-dev/floodgate/internal/timespan"
)

// Request settings of the admin endpoints travel as header fields: every
// query parameter but "action" names a kind, as on /v1/check.
const (
	HeaderRule    = adminapi.HeaderRule    // unban: only this rule's records
	HeaderFor     = adminapi.HeaderFor     // ban: how long ("1h", "30m", "90s", "2d")
	HeaderMessage = adminapi.HeaderMessage // ban: what the subject is told
)

// maxQueryBytes bounds the query string of an admin request.
const maxQueryBytes = 8 << 10

// requestTimeout bounds the Redis work of one admin request: a stuck Redis
// gets a 500, not a hung operator.
const requestTimeout = 10 * time.Second

// Token is an admin token: its Name is the operator recorded in the audit
// of what its holder does.
type Token struct {
	Name, Secret string
}

// MinSecretLen is the shortest admin token secret accepted.
const MinSecretLen = 16

// ParseTokens reads admin tokens given as "name=secret" (--admin-token,
// comma separated). Names follow the operator names' alphabet; secrets are
// at least MinSecretLen bytes; both are unique.
func ParseTokens(specs []string) ([]Token, error) {
	var out []Token
	seen := map[string]bool{}
	for i, s := range specs {
		name, secret, ok := strings.Cut(strings.TrimSpace(s), "=")
		switch {
		case !ok:
			// Without "=" the whole spec may be a secret: say where it is,
			// show nothing of it.
			return nil, fmt.Errorf("admin token %d of %d: want name=secret", i+1, len(specs))
		case !operatorRE.MatchString(name):
			return nil, fmt.Errorf("admin token %q: name must be 1 to 64 of [A-Za-z0-9_.@+-]", name)
		case len(secret) < MinSecretLen:
			return nil, fmt.Errorf("admin token %q: secret shorter than %d bytes", name, MinSecretLen)
		case strings.ContainsAny(secret, " \t\r\n"):
			return nil, fmt.Errorf("admin token %q: secret holds whitespace", name)
		case seen["n:"+name] || seen["s:"+secret]:
			return nil, fmt.Errorf("admin token %q: name or secret given twice", name)
		}
		seen["n:"+name], seen["s:"+secret] = true, true
		out = append(out, Token{Name: name, Secret: secret})
	}
	return out, nil
}

// NewHandler serves the admin endpoints of o, each requiring one of tokens
// as "Authorization: Bearer <secret>":
//
//	GET  /v1/admin/inspect?action=login_failed&ip=203.0.113.7
//	POST /v1/admin/ban?action=login_failed&ip=203.0.113.7     Floodgate-For: 1h, Floodgate-Message: ...
//	POST /v1/admin/unban?action=login_failed&ip=203.0.113.7   [Floodgate-Rule: login-failed]
//	POST /v1/admin/reset?action=login_failed&ip=203.0.113.7
//
// Answers are JSON: 200 with the Inspection or Result, 400 {"error"} for a
// bad request, 401 without a valid admin token, 405, 413, 414, 500.
func NewHandler(o *Operator, tokens []Token, maxBytes int64) (http.Handler, error) {
	if o == nil || len(tokens) == 0 {
		return nil, errors.New("admin handler: an operator and at least one token are required")
	}
	if maxBytes <= 0 {
		maxBytes = decide.DefaultMaxRequestBytes
	}
	h := &handler{o: o, tokens: tokens, maxBytes: maxBytes}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/admin/inspect", h.serve("inspect", http.MethodGet))
	for _, op := range []AdminOp{OpBan, OpUnban, OpReset} {
		mux.HandleFunc("/v1/admin/"+string(op), h.serve(string(op), http.MethodPost))
	}
	// Go's profiler, behind the admin tokens: profiles name internals and
	// cost CPU. A CPU profile or trace runs at most 25 s (?seconds=), under
	// the admin server's write timeout. Not /debug/pprof/cmdline: the
	// command line may hold secrets (--auth-token, --admin-token), and an
	// admin token is no licence to read them (Index answers it 404).
	mux.Handle("/debug/pprof/", h.authed(http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/profile", h.authed(boundSeconds(http.HandlerFunc(pprof.Profile))))
	mux.Handle("/debug/pprof/symbol", h.authed(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("/debug/pprof/trace", h.authed(boundSeconds(http.HandlerFunc(pprof.Trace))))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "no such admin endpoint: " + r.URL.Path})
	})
	return mux, nil
}

// authed lets through requests with an admin token.
func (h *handler) authed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := h.operator(r.Header.Get("Authorization")); !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate-admin"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: "missing or wrong admin token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// maxProfileSeconds keeps a profile inside the admin server's write
// timeout (30 s), which would otherwise cut it off unreported.
const maxProfileSeconds = 25

// boundSeconds caps a profile's ?seconds= at maxProfileSeconds.
func boundSeconds(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if n, err := strconv.Atoi(q.Get("seconds")); err == nil && n > maxProfileSeconds {
			q.Set("seconds", strconv.Itoa(maxProfileSeconds))
			r = r.Clone(r.Context())
			r.URL.RawQuery = q.Encode()
		}
		next.ServeHTTP(w, r)
	})
}

type handler struct {
	o        *Operator
	tokens   []Token
	maxBytes int64
}

type errorBody struct {
	Error string  `json:"error"`
	Done  *Result `json:"done,omitempty"` // what a write did before it failed
}

// serve handles one endpoint: auth first (nothing about the request is
// told without a token), then the method, the request and the action.
func (h *handler) serve(action, method string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, ok := h.operator(r.Header.Get("Authorization"))
		if !ok {
			h.o.actions.WithLabelValues(action, "unauthenticated").Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate-admin"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error: "missing or wrong admin token"})
			return
		}
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", method)
			writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "use " + method + " for /v1/admin/" + action})
			return
		}
		req, status, err := h.request(w, r, name)
		if err != nil {
			h.o.actions.WithLabelValues(action, "invalid").Inc()
			writeJSON(w, status, errorBody{Error: err.Error()})
			return
		}
		v, err := h.run(r, action, req)
		if err != nil {
			status := http.StatusInternalServerError
			if IsInvalid(err) {
				status = http.StatusBadRequest
			}
			body := errorBody{Error: err.Error()}
			if res, ok := v.(Result); ok && len(res.Subjects) > 0 {
				body.Done = &res
			}
			writeJSON(w, status, body)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

func (h *handler) run(r *http.Request, action string, req Request) (any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	switch AdminOp(action) {
	case OpBan:
		return h.o.Ban(ctx, req)
	case OpUnban:
		return h.o.Unban(ctx, req)
	case OpReset:
		return h.o.Reset(ctx, req)
	}
	return h.o.Inspect(ctx, req)
}

// operator returns the name of the token in the Authorization header,
// comparing every token in constant time.
func (h *handler) operator(header string) (string, bool) {
	const p = "bearer "
	if len(header) < len(p) || !strings.EqualFold(header[:len(p)], p) {
		return "", false
	}
	got := []byte(strings.TrimSpace(header[len(p):]))
	name := ""
	for _, t := range h.tokens {
		if subtle.ConstantTimeCompare(got, []byte(t.Secret)) == 1 {
			name = t.Name
		}
	}
	return name, name != ""
}

// request reads the action and subjects from the query (and a POST's form
// body) as /v1/check does, and the settings from the header fields.
func (h *handler) request(w http.ResponseWriter, r *http.Request, operator string) (Request, int, error) {
	if len(r.URL.RawQuery) > maxQueryBytes {
		return Request{}, http.StatusRequestURITooLong, fmt.Errorf("query longer than %d bytes", maxQueryBytes)
	}
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, h.maxBytes)
		if err := r.ParseForm(); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return Request{}, http.StatusRequestEntityTooLarge, fmt.Errorf("body larger than %d bytes", h.maxBytes)
			}
			return Request{}, http.StatusBadRequest, fmt.Errorf("bad form: %w", err)
		}
	} else {
		r.Form = r.URL.Query()
	}
	q, err := decide.ParseQuery(r.Form)
	if err != nil {
		return Request{}, http.StatusBadRequest, err
	}
	req := Request{Action: q.Action, Subjects: q.Subjects, Operator: operator,
		Rule: r.Header.Get(HeaderRule), Message: r.Header.Get(HeaderMessage)}
	if v := r.Header.Get(HeaderFor); v != "" {
		if req.For, err = ParseFor(v); err != nil {
			return Request{}, http.StatusBadRequest, fmt.Errorf("%s: %w", HeaderFor, err)
		}
	}
	return req, 0, nil
}

// ParseFor reads a ban's duration (timespan: "90s", "30m", "1h30m", "2d",
// "1w") from 1s to MaxBan.
func ParseFor(v string) (time.Duration, error) {
	d, err := timespan.ParseDuration(v)
	if err != nil {
		return 0, &Error{Msg: err.Error()}
	}
	if d < time.Second || d > MaxBan {
		return 0, invalidf("duration %q: want 1s to %s, e.g. 90s, 30m, 1h30m, 2d", v, timespan.Format(MaxBan))
	}
	return d, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}
