// Package dashboard is floodgate's web dashboard (`floodgate dashboard`):
// one page over history's SQL functions (totals, top subjects, the curves
// of the last hour, day, month and year at the resolutions the retention
// ladder keeps) and the recent deny decisions of floodgate.decisions. The
// server renders everything, charts included (SVG), from assets embedded in
// the binary; a small script swaps in a fresh panel every few seconds.
//
//	recent := dashboard.NewRecent(50)
//	go dashboard.Follow(ctx, brokers, "floodgate.decisions", recent, logger)
//	h, err := dashboard.New(dashboard.Config{History: history.NewQuerier(pool, ""), Recent: recent})
//	http.ListenAndServe("127.0.0.1:8090", h)
//
// Routes: GET / (the page), GET /panel (the page's refreshable part),
// GET /api/summary (the same as JSON), GET /static/..., GET /healthz,
// GET /metrics. Parameters: action, kind, top; a bad one is a 400. With
// Config.Token, every route but /healthz and /metrics answers 401 without
// it.
package dashboard

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate-dev/floodgate/internal/history"
)

//go:embed assets
var assets embed.FS

// Config configures the dashboard.
type Config struct {
	// History answers the queries. Required.
	History *history.Querier
	// Recent holds the deny decisions shown. Nil: none.
	Recent *Recent
	// Action and Kind are shown when the URL names none. Default "visit"
	// and "link": the shortener's visits per link.
	Action, Kind string
	// Top is how many top subjects are shown. Default 10.
	Top int
	// Refresh is how often the page refreshes itself. Default 5s.
	Refresh time.Duration
	// Timeout bounds the queries of one request. Default 10s.
	Timeout time.Duration
	// Token, when set, is required on every route but /healthz and
	// /metrics (the page shows personal subjects): as "Authorization:
	// Bearer <token>", or as the password of HTTP Basic authentication,
	// any user name, which a browser asks for and then sends with the
	// page's own requests. Empty: none (serve on loopback only).
	Token string
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the dashboard's metrics; Gatherer is served on
	// /metrics. Nil: none.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
}

// Validate reports the first problem with c.
func (c *Config) Validate() error {
	switch {
	case c.History == nil:
		return errors.New("dashboard: no history querier")
	case c.Refresh < 0 || c.Timeout < 0:
		return errors.New("dashboard: negative refresh or timeout")
	case c.Top < 0 || c.Top > 100:
		return fmt.Errorf("dashboard: top %d: want 1..100", c.Top)
	}
	return nil
}

type server struct {
	cfg      Config
	def      Query
	page     *template.Template
	requests *prometheus.CounterVec
	seconds  prometheus.Histogram
}

// New returns the dashboard's handler.
func New(cfg Config) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Action == "" {
		cfg.Action, cfg.Kind = "visit", "link"
	}
	cfg.Top = cmp.Or(cfg.Top, 10)
	cfg.Refresh = cmp.Or(cfg.Refresh, 5*time.Second)
	cfg.Timeout = cmp.Or(cfg.Timeout, 10*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	def, err := parseQuery(nil, Query{Action: cfg.Action, Kind: cfg.Kind, Top: cfg.Top})
	if err != nil {
		return nil, fmt.Errorf("dashboard defaults: %w", err)
	}
	page, err := template.New("").Funcs(template.FuncMap{
		"num": thousands, "svg": SVG, "inc": func(i int) int { return i + 1 },
		"clock":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") },
		"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	}).ParseFS(assets, "assets/page.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard templates: %w", err)
	}
	s := &server{cfg: cfg, def: def, page: page,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_dashboard_requests_total", Help: "Dashboard requests by route and status code.",
		}, []string{"route", "code"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "floodgate_dashboard_query_seconds", Help: "Time to load one page's data from PostgreSQL.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 12),
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.requests, s.seconds} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("dashboard metrics: %w", err)
			}
		}
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", s.count("page", s.authed(s.html("page"))))
	mux.Handle("GET /panel", s.count("panel", s.authed(s.html("panel"))))
	mux.Handle("GET /api/summary", s.count("summary", s.authed(http.HandlerFunc(s.summary))))
	mux.Handle("GET /static/", s.count("static", s.authed(http.StripPrefix("/static/", http.FileServerFS(static)))))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	if cfg.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	return secure(mux), nil
}

// load parses the request's parameters and reads its summary; the error is
// a *BadRequestError for bad parameters.
func (s *server) load(r *http.Request) (*Summary, error) {
	q, err := parseQuery(r.URL.Query(), s.def)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	start := time.Now()
	sum, err := Load(ctx, s.cfg.History, s.cfg.Recent, q, s.cfg.Now())
	s.seconds.Observe(time.Since(start).Seconds())
	return sum, err
}

// html renders template name (the whole page, or the panel it refreshes).
func (s *server) html(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sum, err := s.load(r)
		if err != nil {
			s.fail(w, r, err, false)
			return
		}
		listed := false
		for _, a := range sum.Totals {
			listed = listed || a.Action == sum.Action
		}
		var buf bytes.Buffer
		data := map[string]any{"S": sum, "ActionListed": listed,
			"RefreshMS": s.cfg.Refresh.Milliseconds(), "RefreshS": strconv.FormatFloat(s.cfg.Refresh.Seconds(), 'f', -1, 64)}
		if err := s.page.ExecuteTemplate(&buf, name, data); err != nil {
			s.fail(w, r, fmt.Errorf("render %s: %w", name, err), false)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Dashboard-Time", sum.Now.Format(time.RFC3339))
		_, _ = buf.WriteTo(w) // the client may be gone
	})
}

func (s *server) summary(w http.ResponseWriter, r *http.Request) {
	sum, err := s.load(r)
	if err != nil {
		s.fail(w, r, err, true)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(sum) // the client may be gone
}

// fail answers 400 for bad parameters and 500 (logged) for the rest.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error, asJSON bool) {
	status, msg := http.StatusBadRequest, err.Error()
	var bad *BadRequestError
	if !errors.As(err, &bad) {
		status, msg = http.StatusInternalServerError, "could not load the dashboard: "+err.Error()
		s.cfg.Logger.Error("dashboard", "path", r.URL.Path, "err", err)
	}
	if asJSON {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
		return
	}
	http.Error(w, msg, status)
}

// authed lets through requests carrying the token (Config.Token), in
// constant time; everything without a token configured.
func (s *server) authed(next http.Handler) http.Handler {
	if s.cfg.Token == "" {
		return next
	}
	want := []byte(s.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := "", false
		if _, pw, basic := r.BasicAuth(); basic {
			got, ok = pw, true
		} else if h := r.Header.Get("Authorization"); len(h) > len("bearer ") && strings.EqualFold(h[:len("bearer ")], "bearer ") {
			got, ok = strings.TrimSpace(h[len("bearer "):]), true
		}
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="floodgate dashboard", charset="UTF-8"`)
			http.Error(w, "missing or wrong dashboard token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// secure adds headers that keep the page to its own assets: no inline
// script, nothing from elsewhere.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

func (s *server) count(route string, next http.Handler) http.Handler {
	return promhttp.InstrumentHandlerCounter(s.requests.MustCurryWith(prometheus.Labels{"route": route}), next)
}
