package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"floodgate/rules/reload"
)

// newRegistry is a long-running process's metrics registry, with the Go
// runtime and process collectors and floodgate_build_info every one of
// them exports.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBuildInfo(reg)
	return reg
}

// watchRules loads the rules file and keeps reloading it on change and on
// SIGHUP; a bad file at start is an error, a bad file later keeps the last
// good rules.
func watchRules(path string, logger *slog.Logger, reg prometheus.Registerer) (*reload.Watcher, error) {
	w, err := reload.NewWatcher(reload.WatcherConfig{Path: path, SIGHUP: true, Logger: logger, Registerer: reg})
	if err != nil {
		return nil, err
	}
	logger.Info("rules loaded", "path", path, "rules", len(w.Current().Rules()))
	return w, nil
}
