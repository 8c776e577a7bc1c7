// Package version says which build of floodgate is running: the module
// version, commit and build date, from the Go build info, or from the
// linker where the build has no VCS stamp (a source archive, the
// Dockerfile's build):
//
//	go build -ldflags "-X github.com/floodgate-dev/floodgate/internal/version.version=v1.2.3 \
//		-X github.com/floodgate-dev/floodgate/internal/version.commit=abc123 \
//		-X github.com/floodgate-dev/floodgate/internal/version.date=2026-12-04T00:00:00Z" ./cmd/floodgate
//
// Every long-running process exports it as floodgate_build_info.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Set by the linker (-X); the build info wins where it has them.
var (
	version = ""
	commit  = ""
	date    = ""
)

// Info is what this binary was built from.
type Info struct {
	Version, Commit, Date, GoVersion string
	Modified                         bool
}

// Read returns the build's Info: the Go build info's module version and VCS
// stamp where present, else the linker's values, else "(devel)" and
// "unknown".
func Read() Info {
	b := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			b.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.Date = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	for _, s := range []*string{&b.Commit, &b.Date} {
		if *s == "" {
			*s = "unknown"
		}
	}
	return b
}

// String is the one line `floodgate version` prints.
func (b Info) String() string {
	dirty := ""
	if b.Modified {
		dirty = " (modified)"
	}
	return fmt.Sprintf("floodgate %s commit %s%s built %s %s", b.Version, b.Commit, dirty, b.Date, b.GoVersion)
}

// Collector is floodgate_build_info, for a process's registry: always 1,
// the build in labels, so that a dashboard tells which version each
// process runs.
func Collector() prometheus.Collector {
	b := Read()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "floodgate_build_info",
		Help: "Always 1; labels say which build of floodgate this process runs.",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "commit": b.Commit, "date": b.Date, "goversion": b.GoVersion,
		},
	})
	g.Set(1)
	return g
}
