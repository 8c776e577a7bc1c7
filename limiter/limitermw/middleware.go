// Package limitermw is net/http middleware for Go web apps: it asks the
// limiter before the handler (429 with Retry-After and the RateLimit header
// fields when denied) and publishes the access event after it.
//
//	lc, _ := limiterclient.New(limiterclient.Config{BaseURL: "http://127.0.0.1:8080"})
//	pub, _ := producer.New(producer.Config{Brokers: brokers, Async: true})
//	mw, err := limitermw.New(limitermw.Config{
//		Checker:   lc,
//		Action:    "login_failed",
//		Subjects:  func(r *http.Request) []limitapi.Subject {
//			// as the limiter counts it (trimmed, lowercased): the events
//			// published below are keyed by it
//			email := strings.ToLower(strings.TrimSpace(r.FormValue("email")))
//			return []limitapi.Subject{{Kind: "ip", Subject: limitermw.ClientIP(r)}, {Kind: "email", Subject: email}}
//		},
//		Publisher: pub,
//		// Count only failed logins.
//		Publish: func(r *http.Request, status int) bool { return status == http.StatusUnauthorized },
//	})
//	http.Handle("/login", mw(loginHandler))
//
// The limiter normalizes the subjects it decides (the rules file's kinds:
// an e-mail trimmed and lowercased, an IP address in canonical form), so
// "VICTIM@x.example" is checked as victim@x.example whatever the app
// passes. The events the middleware publishes carry the subjects as
// Subjects returns them, and their Kafka key places them: pass them
// normalized, as above, or an attacker's spellings are counted apart from
// the subject the limiter looks up (docs/rules.md, "Kinds").
//
// With Take, the middleware asks the limiter to check and count at once
// (strict rules, docs/takes.md): the limiter publishes the events itself,
// so the middleware publishes nothing.
//
//	create, err := limitermw.New(limitermw.Config{Checker: lc, Take: true, Action: "link_create", FailClosed: true})
//
// Public: what a Go web app embeds to put a limiter in front of a handler;
// it links limitapi and event, and no client of its own (a
// limiterclient.Client or any Checker does).
package limitermw

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// Checker decides; *limiterclient.Client implements it.
type Checker interface {
	Check(ctx context.Context, req limitapi.Request) (limitapi.Decision, error)
}

// Taker checks and counts in one step (strict mode) and publishes the
// events of what it admits; *limiterclient.Client implements it.
type Taker interface {
	Take(ctx context.Context, req limitapi.Request) (limitapi.Decision, error)
}

// Publisher publishes access events; *producer.Publisher implements it.
type Publisher interface {
	Publish(ctx context.Context, events ...event.Event) error
}

// Config configures the middleware.
type Config struct {
	// Checker is asked before the handler. Required; with Take it must
	// implement Taker too.
	Checker Checker
	// Take makes the middleware call Taker.Take instead of Check: strict
	// rules are counted by the limiter when it admits the request, and the
	// limiter publishes the access events. Every admitted request is then
	// counted, whatever the handler answers. Default false (Check).
	Take bool
	// Action is checked and published. Required.
	Action string
	// Subjects returns the request's features. Default: the client IP
	// (kind "ip", TrustedProxies.ClientIP). Empty subjects are dropped. Return them
	// normalized as the rules file's kinds say (an e-mail trimmed and
	// lowercased): the limiter decides them normalized whatever they are,
	// but the events published are keyed as given.
	Subjects func(r *http.Request) []limitapi.Subject
	// TrustedProxies may name the client in X-Forwarded-For, for the
	// default Subjects (and for a Subjects of the app's own, through
	// TrustedProxies.ClientIP). Default none: the peer is the client.
	TrustedProxies Proxies
	// Publisher receives the access event after the handler, one event per
	// subject, each carrying the request's other subjects as attrs. Nil:
	// nothing is published. Must be nil with Take (the limiter publishes).
	Publisher Publisher
	// Publish says whether a handled request is an event of Action, given
	// the status the handler wrote. Default: every request.
	Publish func(r *http.Request, status int) bool
	// FailClosed answers 503 when the limiter cannot be reached. Default
	// false: the request goes through (the limiter has its own failure mode
	// for Redis; this one is for the limiter itself). A request the limiter
	// refuses as invalid (limitapi.ErrRefused) is answered 400 whatever
	// FailClosed says: it is never let through.
	FailClosed bool
	// Now is the clock of published events. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.Checker == nil:
		return errors.New("limitermw: nil checker")
	case c.Action == "":
		return errors.New("limitermw: no action")
	case c.Take && c.Publisher != nil:
		return errors.New("limitermw: Take publishes through the limiter; a Publisher would publish every event twice")
	}
	if _, ok := c.Checker.(Taker); c.Take && !ok {
		return errors.New("limitermw: Take needs a checker that implements Taker")
	}
	return nil
}

// New returns the middleware.
func New(cfg Config) (func(http.Handler) http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Subjects == nil {
		cfg.Subjects = func(r *http.Request) []limitapi.Subject {
			return []limitapi.Subject{{Kind: "ip", Subject: cfg.TrustedProxies.ClientIP(r)}}
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &middleware{cfg: cfg}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

type middleware struct {
	cfg Config
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	var subs []limitapi.Subject
	for _, s := range m.cfg.Subjects(r) {
		if s.Subject != "" {
			subs = append(subs, s)
		}
	}
	if len(subs) > 0 && !m.admit(w, r, subs) {
		return
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	next.ServeHTTP(sw, r)
	if m.cfg.Publisher == nil || len(subs) == 0 || (m.cfg.Publish != nil && !m.cfg.Publish(r, sw.status)) {
		return
	}
	evs := Events(m.cfg.Action, m.cfg.Now(), subs)
	if err := m.cfg.Publisher.Publish(context.WithoutCancel(r.Context()), evs...); err != nil {
		m.cfg.Logger.Error("limitermw: publish access event", "action", m.cfg.Action, "err", err)
	}
}

// admit asks the limiter and reports whether the handler may run; when it
// may not, the answer (429, 400 or 503) is written.
func (m *middleware) admit(w http.ResponseWriter, r *http.Request, subs []limitapi.Subject) bool {
	req := limitapi.Request{Action: m.cfg.Action, Subjects: subs}
	var d limitapi.Decision
	var err error
	if m.cfg.Take {
		d, err = m.cfg.Checker.(Taker).Take(r.Context(), req)
	} else {
		d, err = m.cfg.Checker.Check(r.Context(), req)
	}
	switch {
	case errors.Is(err, limitapi.ErrRefused):
		// The request, not the limiter, is at fault: letting it through
		// would let through whoever makes requests invalid. (A subject
		// over its limit still denies: the limiter refuses only when none
		// of the valid subjects is denied.)
		m.cfg.Logger.Warn("limitermw: limiter refused the request", "action", m.cfg.Action, "take", m.cfg.Take, "err", err)
		http.Error(w, "request refused by the rate limiter", http.StatusBadRequest)
		return false
	case err != nil && m.cfg.FailClosed:
		m.cfg.Logger.Warn("limitermw: limiter failed, refusing", "action", m.cfg.Action, "take", m.cfg.Take, "err", err)
		http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
		return false
	case err != nil:
		m.cfg.Logger.Warn("limitermw: limiter failed, letting the request through", "action", m.cfg.Action, "take", m.cfg.Take, "err", err)
		return true
	case !d.Allowed:
		limitapi.SetHeaders(w.Header(), d)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_ = json.NewEncoder(w).Encode(limitapi.Result(d)) // the client may be gone
		return false
	}
	limitapi.SetHeaders(w.Header(), d)
	return true
}

// Events returns one event per subject of a request, each carrying the
// request's subjects of other kinds as attrs (docs/events.md): the visit
// of a link relates the visitor's IP, the failed login of an IP the e-mail
// tried. A kind named twice keeps its first subject in attrs; attrs are
// capped at event.MaxAttrs kinds, in kind order.
func Events(action string, ts time.Time, subs []limitapi.Subject) []event.Event {
	byKind := map[string]string{}
	for _, s := range subs {
		if _, ok := byKind[s.Kind]; !ok {
			byKind[s.Kind] = s.Subject
		}
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	out := make([]event.Event, 0, len(subs))
	for _, s := range subs {
		e := event.Event{V: event.Version, ID: event.NewID(), Action: action, Kind: s.Kind, Subject: s.Subject, TS: ts, N: 1}
		for _, k := range kinds {
			if k == s.Kind || len(e.Attrs) == event.MaxAttrs {
				continue
			}
			if e.Attrs == nil {
				e.Attrs = map[string]string{}
			}
			e.Attrs[k] = byKind[k]
		}
		out = append(out, e)
	}
	return out
}

// statusWriter remembers the status the handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
