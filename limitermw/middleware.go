// Package limitermw is net/http middleware for Go web apps: it asks the
// limiter before the handler (429 with Retry-After and the RateLimit header
// fields when denied) and publishes the access event after it.
//
//	lc, _ := limiterclient.New(limiterclient.Config{BaseURL: "http://127.0.0.1:8080"})
//	pub, _ := producer.New(producer.Config{Brokers: brokers, Async: true})
//	mw, err := limitermw.New(limitermw.Config{
//		Checker:   lc,
//		Action:    "login_failed",
//		Subjects:  func(r *http.Request) []limitapi.Subject { return []limitapi.Subject{{Kind: "ip", Subject: limitermw.ClientIP(r)}, {Kind: "email", Subject: r.FormValue("email")}} },
//		Publisher: pub,
//		// Count only failed logins.
//		Publish: func(r *http.Request, status int) bool { return status == http.StatusUnauthorized },
//	})
//	http.Handle("/login", mw(loginHandler))
package limitermw

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"floodgate/event"
	"floodgate/limitapi"
)

// Checker decides; *limiterclient.Client and *limiter.Limiter implement it.
type Checker interface {
	Check(ctx context.Context, req limitapi.Request) (limitapi.Decision, error)
}


// Publisher publishes access events; *producer.Publisher implements it.
type Publisher interface {
	Publish(ctx context.Context, events ...event.Event) error
}

// Config configures the middleware.
type Config struct {
	// Checker is asked before the handler. Required.
	Checker Checker
	// Action is checked and published. Required.
	Action string
	// Subjects returns the request's features. Default: the client IP
	// (kind "ip", from RemoteAddr). Empty subjects are dropped.
	Subjects func(r *http.Request) []limitapi.Subject
	// Publisher receives the access event after the handler, one event per
	// subject. Nil: nothing is published.
	Publisher Publisher
	// Publish says whether a handled request is an event of Action, given
	// the status the handler wrote. Default: every request.
	Publish func(r *http.Request, status int) bool
	// FailClosed answers 503 when the limiter cannot be reached. Default
	// false: the request goes through (the limiter has its own failure mode
	// for Redis; this one is for the limiter itself).
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
			return []limitapi.Subject{{Kind: "ip", Subject: ClientIP(r)}}
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var subs []limitapi.Subject
			for _, s := range cfg.Subjects(r) {
				if s.Subject != "" {
					subs = append(subs, s)
				}
			}
			if len(subs) > 0 {
				d, err := cfg.Checker.Check(r.Context(), limitapi.Request{Action: cfg.Action, Subjects: subs})
				switch {
				case err != nil && cfg.FailClosed:
					cfg.Logger.Warn("limitermw: check failed, refusing", "action", cfg.Action, "err", err)
					http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
					return
				case err != nil:
					cfg.Logger.Warn("limitermw: check failed, letting the request through", "action", cfg.Action, "err", err)
				case !d.Allowed:
					limitapi.SetHeaders(w.Header(), d)
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusTooManyRequests)
					_ = json.NewEncoder(w).Encode(limitapi.Result(d)) // the client may be gone
					return
				default:
					limitapi.SetHeaders(w.Header(), d)
				}
			}
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, r)
			if cfg.Publisher == nil || len(subs) == 0 || (cfg.Publish != nil && !cfg.Publish(r, sw.status)) {
				return
			}
			feats := make(map[string]string, len(subs))
			for _, s := range subs {
				feats[s.Kind] = s.Subject
			}
			evs := event.Split(cfg.Action, cfg.Now(), feats)
			if err := cfg.Publisher.Publish(context.WithoutCancel(r.Context()), evs...); err != nil {
				cfg.Logger.Error("limitermw: publish access event", "action", cfg.Action, "err", err)
			}
		})
	}, nil
}

// ClientIP returns the host of r.RemoteAddr. Behind a proxy, use a
// Subjects function that reads the header your proxy sets.
func ClientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
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
