// Package rules reads floodgate's rules file: which actions are limited, for
// which feature kinds, by which sliding-window limits, with shadow mode,
// strict mode, an allowlist and a deny message per rule. docs/rules.md
// describes the format.
//
// A rules file is validated whole at load; errors carry the line and reason.
// A Watcher reloads on SIGHUP and on file change and keeps the last good set
// when a new file is refused:
//
//	w, err := rules.NewWatcher(rules.WatcherConfig{Path: "examples/rules.yaml", SIGHUP: true})
//	if err != nil { ... }
//	go w.Run(ctx)
//	for _, r := range w.Current().Match("login_failed", "ip") {
//		if r.Allowed(ip) { continue }
//		for _, l := range r.Limits { ... } // l.Count events per l.Window
//	}
package rules
