// Package reload keeps a process's rules in force: a Watcher loads the rules
// file, reloads it on SIGHUP and when the file changes (editors' rename
// swaps and Kubernetes ConfigMap symlink swaps included), and keeps the last
// good set when a new file is refused. It is apart from package rules so that
// code that only reads rules links neither fsnotify nor Prometheus.
//
//	w, err := reload.NewWatcher(reload.WatcherConfig{Path: "examples/rules.yaml", SIGHUP: true})
//	if err != nil { ... }
//	go w.Run(ctx)
//	set := w.Current() // *rules.Set, swapped atomically on reload
package reload
