// Package service is the shortener's HTTP surface, guarded by floodgate
// through its public client packages only (limiterclient, limitermw,
// limitapi, producer, event):
//
//	POST /links   {"url": "https://..."} or url=... (form): 201 with the code
//	              (200 when the URL had one), 400 with {"error": ...} for a bad
//	              URL. Guarded by a strict Take per client IP (action
//	              link_create): the limiter counts and publishes.
//	GET  /{code}  302 to the URL, and a visit event per feature: kind link
//	              (attrs: the visitor's IP) and kind ip (attrs: the link).
//	              Checked against the visit rules first; 404 for unknown codes.
//	GET  /healthz, /readyz (PostgreSQL answers), /metrics
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate-dev/floodgate/examples/shortener/links"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
	"github.com/floodgate-dev/floodgate/limiter/limitermw"
)

// Actions of the events the shortener produces.
const (
	ActionCreate = "link_create"
	ActionVisit  = "visit"
)

// Limiter checks visits and takes link creations; *limiterclient.Client
// implements it.
type Limiter interface {
	limitermw.Checker
	limitermw.Taker
}

// Config configures the service.
type Config struct {
	// Links stores the links. Required.
	Links *links.Store
	// Limiter guards both routes. Required.
	Limiter Limiter
	// Publisher receives visit events. Required.
	Publisher limitermw.Publisher
	// BaseURL prefixes codes in answers, e.g. "https://sho.rt". Required.
	BaseURL string
	// TrustedProxies may set the client address in X-Forwarded-For (nginx
	// in front, with proxy_add_x_forwarded_for). Default none: the peer
	// address is the client. X-Real-IP is never read.
	TrustedProxies limitermw.Proxies
	// MaxBodyBytes bounds POST /links bodies. Default 8 KiB.
	MaxBodyBytes int64
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the service's metrics. Nil: not registered.
	Registerer prometheus.Registerer
	// Gatherer is served on /metrics. Nil: no /metrics.
	Gatherer prometheus.Gatherer
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.Links == nil:
		return errors.New("shortener: no link store")
	case c.Limiter == nil:
		return errors.New("shortener: no limiter")
	case c.Publisher == nil:
		return errors.New("shortener: no publisher")
	case c.BaseURL == "":
		return errors.New("shortener: no base URL")
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("shortener: max body bytes %d is negative", c.MaxBodyBytes)
	}
	return nil
}

type server struct {
	cfg      Config
	log      *slog.Logger
	requests *prometheus.CounterVec
}

// New returns the service's handler.
func New(cfg Config) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 8 << 10
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	s := &server{cfg: cfg, log: cfg.Logger, requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shortener_requests_total", Help: "Requests by route and status code.",
	}, []string{"route", "code"})}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.requests); err != nil {
			return nil, fmt.Errorf("shortener metrics: %w", err)
		}
	}
	create, err := limitermw.New(limitermw.Config{
		Checker: cfg.Limiter, Take: true, Action: ActionCreate, Subjects: s.ipSubject,
		// Strict limits promise zero overshoot: without the limiter, no
		// links are created rather than any number of them.
		FailClosed: true, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	visit, err := limitermw.New(limitermw.Config{
		Checker: cfg.Limiter, Action: ActionVisit, Subjects: s.visitSubjects, Publisher: cfg.Publisher,
		// Only a redirect is a visit; an unknown code is not.
		Publish: func(_ *http.Request, status int) bool { return status == http.StatusFound },
		Logger:  cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /links", s.count("create", create(http.HandlerFunc(s.create))))
	mux.Handle("GET /{code}", s.count("visit", visit(http.HandlerFunc(s.visit))))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", s.ready)
	if cfg.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	return mux, nil
}

// linkJSON is the answer of POST /links.
type linkJSON struct {
	Code     string    `json:"code"`
	ShortURL string    `json:"short_url"`
	URL      string    `json:"url"`
	Created  time.Time `json:"created_at"`
}

func (s *server) create(w http.ResponseWriter, r *http.Request) {
	raw, err := readURL(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", mbe.Limit))
			return
		}
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	l, created, err := s.cfg.Links.Create(r.Context(), raw, s.clientIP(r))
	var bad *links.InvalidURLError
	switch {
	case errors.As(err, &bad):
		writeError(w, http.StatusBadRequest, bad.Error())
		return
	case err != nil:
		s.log.Error("create link", "err", err)
		writeError(w, http.StatusInternalServerError, "could not create the link")
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	short := s.cfg.BaseURL + "/" + l.Code
	w.Header().Set("Location", short)
	writeJSON(w, status, linkJSON{Code: l.Code, ShortURL: short, URL: l.URL, Created: l.CreatedAt.UTC()})
}

// readURL reads the url field of a JSON or form body.
func readURL(w http.ResponseWriter, r *http.Request, limit int64) (string, error) {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/json" {
		var body struct {
			URL string `json:"url"`
		}
		dec := json.NewDecoder(r.Body)
		if err := dec.Decode(&body); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return "", err
			}
			return "", fmt.Errorf(`body: want {"url": "https://..."}: %w`, err)
		}
		return body.URL, nil
	}
	if err := r.ParseForm(); err != nil {
		return "", fmt.Errorf("form body: %w", err)
	}
	return r.PostForm.Get("url"), nil
}

func (s *server) visit(w http.ResponseWriter, r *http.Request) {
	code := r.PathValue("code")
	target, err := s.cfg.Links.Resolve(r.Context(), code)
	switch {
	case errors.Is(err, links.ErrNotFound):
		writeError(w, http.StatusNotFound, fmt.Sprintf("no link %q", code))
		return
	case err != nil:
		s.log.Error("resolve link", "code", code, "err", err)
		writeError(w, http.StatusInternalServerError, "could not resolve the link")
		return
	}
	// Every visit must reach the shortener to be counted: no caching.
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, target, http.StatusFound)
}

func (s *server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Links.Ping(ctx); err != nil {
		http.Error(w, "postgres: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// ipSubject is the client IP: what link creation is limited by.
func (s *server) ipSubject(r *http.Request) []limitapi.Subject {
	return []limitapi.Subject{{Kind: "ip", Subject: s.clientIP(r)}}
}

// visitSubjects are the visitor's IP (the visit rules) and the link (its
// history); a path that cannot be a code is not a link worth a subject.
func (s *server) visitSubjects(r *http.Request) []limitapi.Subject {
	subs := s.ipSubject(r)
	if code := r.PathValue("code"); links.ValidCode(code) {
		subs = append(subs, limitapi.Subject{Kind: "link", Subject: code})
	}
	return subs
}

// clientIP is the client as the trusted proxies name it
// (limitermw.Proxies.ClientIP: never X-Real-IP).
func (s *server) clientIP(r *http.Request) string { return s.cfg.TrustedProxies.ClientIP(r) }

// count counts requests by route and status.
func (s *server) count(route string, next http.Handler) http.Handler {
	return promhttp.InstrumentHandlerCounter(s.requests.MustCurryWith(prometheus.Labels{"route": route}), next)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone
}
