package reload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/internal/rules"
)

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Path of the rules file. Required.
	Path string
	// Debounce is how long file events must be quiet before a reload, so an
	// editor's write-rename-chmod burst reloads once. Default 100ms.
	Debounce time.Duration
	// SIGHUP reloads on the HUP signal. Default false (the command sets it).
	SIGHUP bool
	// OnReload, when set, is called with each new Set after it was installed.
	OnReload func(*rules.Set)
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives floodgate_rules_reloads_total{result} and
	// floodgate_rules_loaded; nil registers nothing.
	Registerer prometheus.Registerer
}

// Watcher holds the current rules and reloads them on SIGHUP and when the
// file changes. A file that fails to load is logged and ignored: the last
// good rules stay in force.
type Watcher struct {
	cfg     WatcherConfig
	cur     atomic.Pointer[rules.Set]
	last    []byte // content of the current set's file
	mu      sync.Mutex
	reloads *prometheus.CounterVec
	loaded  prometheus.Gauge
	// watching is closed once Run watches the file and, when configured,
	// SIGHUP: a change or signal before that point would go unnoticed.
	watching chan struct{}
	once     sync.Once
}

// NewWatcher loads the file once; a bad file is an error here, since there is
// no last good set to keep.
func NewWatcher(cfg WatcherConfig) (*Watcher, error) {
	if cfg.Path == "" {
		return nil, errors.New("rules watcher: path is required")
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Watcher{
		cfg:      cfg,
		watching: make(chan struct{}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rules_reloads_total",
			Help: "Rules file reloads by result (ok, error).",
		}, []string{"result"}),
		loaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_rules_loaded",
			Help: "Number of rules in force.",
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{w.reloads, w.loaded} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("rules watcher: register metrics: %w", err)
			}
		}
	}
	data, err := os.ReadFile(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	s, err := parseFile(cfg.Path, data)
	if err != nil {
		return nil, err
	}
	w.install(s, data)
	return w, nil
}

// Current returns the rules in force. Safe for concurrent use.
func (w *Watcher) Current() *rules.Set { return w.cur.Load() }

func (w *Watcher) install(s *rules.Set, data []byte) {
	w.cur.Store(s)
	w.last = data
	w.loaded.Set(float64(len(s.Rules())))
}

func parseFile(path string, data []byte) (*rules.Set, error) {
	s, err := rules.Parse(data)
	if err != nil {
		var e *rules.Error
		if errors.As(err, &e) {
			e.File = path
		}
		return nil, err
	}
	return s, nil
}

// Watching is closed once Run has started watching the file and, when
// configured, SIGHUP.
func (w *Watcher) Watching() <-chan struct{} { return w.watching }

// Reload reads the file again. On error the current rules stay; the error is
// returned and logged. An unchanged file is a no-op.
func (w *Watcher) Reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	data, err := os.ReadFile(w.cfg.Path)
	if err != nil {
		w.reloads.WithLabelValues("error").Inc()
		w.cfg.Logger.Error("rules reload failed; keeping the last good rules", "path", w.cfg.Path, "err", err)
		return fmt.Errorf("read rules: %w", err)
	}
	if bytes.Equal(data, w.last) {
		return nil
	}
	s, err := parseFile(w.cfg.Path, data)
	if err != nil {
		w.reloads.WithLabelValues("error").Inc()
		w.cfg.Logger.Error("rules reload refused; keeping the last good rules", "path", w.cfg.Path, "err", err)
		return err
	}
	w.install(s, data)
	w.reloads.WithLabelValues("ok").Inc()
	w.cfg.Logger.Info("rules reloaded", "path", w.cfg.Path, "rules", len(s.Rules()), "max_window", rules.FormatWindow(s.MaxWindow()))
	if w.cfg.OnReload != nil {
		w.cfg.OnReload(s)
	}
	return nil
}

// Run watches the file's directory (so that editors' write-to-temp-and-rename
// and symlink swaps are seen) and, when configured, SIGHUP, reloading until
// ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rules watcher: %w", err)
	}
	defer fw.Close()
	dir := filepath.Dir(w.cfg.Path)
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("rules watcher: watch %s: %w", dir, err)
	}
	var hup chan os.Signal
	if w.cfg.SIGHUP {
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	w.once.Do(func() { close(w.watching) })
	base := filepath.Base(w.cfg.Path)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			w.cfg.Logger.Info("SIGHUP: reloading rules", "path", w.cfg.Path)
			_ = w.Reload()
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			// The file itself, or a Kubernetes-style ..data symlink swap.
			if name := filepath.Base(ev.Name); name == base || name == "..data" {
				timer.Reset(w.cfg.Debounce)
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			w.cfg.Logger.Warn("rules watcher error", "err", err)
		case <-timer.C:
			if _, err := os.Stat(w.cfg.Path); err != nil {
				// Mid-rename; the create event that follows re-arms the timer.
				continue
			}
			_ = w.Reload()
		}
	}
}

// Watch loads the rules file at path and returns a Watcher that reloads it
// on change and on SIGHUP (run it with Run): a bad file at start is an
// error, a bad file later keeps the last good rules.
func Watch(path string, logger *slog.Logger, reg prometheus.Registerer) (*Watcher, error) {
	if err := rules.Found(path); err != nil {
		return nil, err
	}
	w, err := NewWatcher(WatcherConfig{Path: path, SIGHUP: true, Logger: logger, Registerer: reg})
	if err != nil {
		return nil, err
	}
	logger.Info("rules loaded", "path", path, "rules", len(w.Current().Rules()))
	return w, nil
}
