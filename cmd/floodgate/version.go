package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Set with -ldflags "-X main.version=... -X main.commit=... -X main.date=..."
// where the build has no VCS stamp (GOFLAGS=-buildvcs=false, or a build
// from a source archive, as in the Dockerfile); the build info wins when
// it has them.
var (
	version = ""
	commit  = ""
	date    = ""
)

// buildInfo is what this binary was built from.
type buildInfo struct {
	Version, Commit, Date, GoVersion string
	Modified                         bool
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version()}
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

func (b buildInfo) String() string {
	dirty := ""
	if b.Modified {
		dirty = " (modified)"
	}
	return fmt.Sprintf("floodgate %s commit %s%s built %s %s", b.Version, b.Commit, dirty, b.Date, b.GoVersion)
}

// VersionCmd prints the build info.
type VersionCmd struct{}

// Run prints one line: version, commit, date, Go version.
func (VersionCmd) Run(context.Context) error {
	_, err := fmt.Fprintln(os.Stdout, readBuildInfo())
	return err
}

// registerBuildInfo exports floodgate_build_info: always 1, the build in
// labels, so a dashboard can tell which version each process runs.
func registerBuildInfo(reg prometheus.Registerer) {
	b := readBuildInfo()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "floodgate_build_info",
		Help: "Always 1; labels say which build of floodgate this process runs.",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "commit": b.Commit, "date": b.Date, "goversion": b.GoVersion,
		},
	})
	g.Set(1)
	reg.MustRegister(g)
}
