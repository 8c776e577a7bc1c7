package deploy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goreleaserConfig is the part of GoReleaser's configuration
// .goreleaser.yaml uses, decoded strictly: a key misspelt or not here fails
// (GoReleaser's own types would bring its whole module into this one's).
type goreleaserConfig struct {
	Version     int    `json:"version"`
	ProjectName string `json:"project_name"`
	Builds      []struct {
		ID              string   `json:"id"`
		Main            string   `json:"main"`
		Binary          string   `json:"binary"`
		NoUniqueDistDir bool     `json:"no_unique_dist_dir"`
		Goos            []string `json:"goos"`
		Goarch          []string `json:"goarch"`
		Env             []string `json:"env"`
		Flags           []string `json:"flags"`
		Ldflags         []string `json:"ldflags"`
		ModTimestamp    string   `json:"mod_timestamp"`
	} `json:"builds"`
	Archives []struct {
		ID                   string   `json:"id"`
		IDs                  []string `json:"ids"`
		Formats              []string `json:"formats"`
		NameTemplate         string   `json:"name_template"`
		StripBinaryDirectory bool     `json:"strip_binary_directory"`
		Files                []string `json:"files"`
	} `json:"archives"`
	SBOMs []struct {
		ID        string   `json:"id"`
		Artifacts string   `json:"artifacts"`
		Cmd       string   `json:"cmd"`
		Args      []string `json:"args"`
		Documents []string `json:"documents"`
	} `json:"sboms"`
	Checksum struct {
		NameTemplate string `json:"name_template"`
		Algorithm    string `json:"algorithm"`
	} `json:"checksum"`
	Snapshot struct {
		VersionTemplate string `json:"version_template"`
	} `json:"snapshot"`
	Changelog struct {
		Disable bool `json:"disable"`
	} `json:"changelog"`
	Release struct {
		Disable bool `json:"disable"`
	} `json:"release"`
	ReportSizes bool `json:"report_sizes"`
}

// TestReleaseConfig checks what `make release` is made of without running
// it (GoReleaser takes minutes to build, and the release its own run):
// .goreleaser.yaml builds linux and darwin on amd64 and arm64 from
// cmd/floodgate with the version variables internal/version has, where the Dockerfile's
// release target copies the binary from; SHA-256 checksums and a
// CycloneDX SBOM per binary; the Makefile pins its tools; the Dockerfile
// labels the image; the image script parses; CHANGELOG.md has its
// Unreleased section.
func TestReleaseConfig(t *testing.T) {
	raw, err := os.ReadFile("../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c goreleaserConfig
	if err := strictJSON(raw, &c); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	if c.Version != 2 || c.ProjectName != "floodgate" || len(c.Builds) != 1 {
		t.Fatalf(".goreleaser.yaml: version %d, project %q, %d builds; want GoReleaser 2's, floodgate, one build", c.Version, c.ProjectName, len(c.Builds))
	}
	b := c.Builds[0]
	if b.Main != "./cmd/floodgate" {
		t.Errorf("build main %q, want ./cmd/floodgate", b.Main)
	}
	for _, want := range [][2][]string{{b.Goos, {"darwin", "linux"}}, {b.Goarch, {"amd64", "arm64"}}} {
		if got := slices.Sorted(slices.Values(want[0])); !slices.Equal(got, want[1]) {
			t.Errorf("build platforms %v, want %v", got, want[1])
		}
	}
	if !slices.Contains(b.Env, "CGO_ENABLED=0") || !slices.Contains(b.Flags, "-trimpath") || !slices.Contains(b.Flags, "-buildvcs=false") {
		t.Errorf("build env %v, flags %v: want a static, trimmed build whose version comes from the ldflags", b.Env, b.Flags)
	}

	// Every -X names a string variable of the version package.
	vars := versionStringVars(t)
	ldflags := strings.Join(b.Ldflags, " ")
	set := regexp.MustCompile(`-X `+regexp.QuoteMeta(versionPkg)+`\.(\w+)=`).FindAllStringSubmatch(ldflags, -1)
	var names []string
	for _, m := range set {
		names = append(names, m[1])
		if !vars[m[1]] {
			t.Errorf("ldflags set %s.%s, which it does not declare", versionPkg, m[1])
		}
	}
	if slices.Sort(names); !slices.Equal(names, []string{"commit", "date", "version"}) {
		t.Errorf("ldflags set %s.%v, want version, commit and date", versionPkg, names)
	}

	// The binary lands where the Dockerfile's release target copies it from.
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	copyFrom := regexp.MustCompile(`(?m)^COPY (dist/\S+) /usr/local/bin/floodgate$`).FindSubmatch(df)
	if copyFrom == nil {
		t.Fatal("Dockerfile: no release target copying dist/... to /usr/local/bin/floodgate")
	}
	tmpl := strings.NewReplacer("{{ .Os }}", "${TARGETOS}", "{{ .Arch }}", "${TARGETARCH}").Replace(b.Binary)
	if !b.NoUniqueDistDir || "dist/"+tmpl != string(copyFrom[1]) {
		t.Errorf("build binary %q (no_unique_dist_dir %t) is not where the Dockerfile copies from, %s", b.Binary, b.NoUniqueDistDir, copyFrom[1])
	}
	for _, l := range []string{"title", "description", "source", "licenses", "version", "revision", "created"} {
		if !regexp.MustCompile(`org\.opencontainers\.image\.` + l + `="[^"]+"`).Match(df) {
			t.Errorf("Dockerfile: no org.opencontainers.image.%s label", l)
		}
	}
	if license, _ := os.ReadFile("../LICENSE"); strings.Contains(string(license), "Apache License") && !strings.Contains(string(df), `org.opencontainers.image.licenses="Apache-2.0"`) {
		t.Error("Dockerfile: the licenses label is not LICENSE's Apache-2.0")
	}

	if len(c.Archives) != 1 || !c.Archives[0].StripBinaryDirectory {
		t.Errorf("archives %+v: want one, holding the binary at its top", c.Archives)
	}
	for _, a := range c.Archives {
		for _, f := range a.Files {
			if _, err := os.Stat(filepath.Join("..", f)); err != nil {
				t.Errorf("archive file %s: %v", f, err)
			}
		}
	}
	if c.Checksum.Algorithm != "sha256" {
		t.Errorf("checksum algorithm %q, want sha256", c.Checksum.Algorithm)
	}
	if len(c.SBOMs) != 1 || c.SBOMs[0].Artifacts != "binary" || c.SBOMs[0].Cmd != "cyclonedx-gomod" {
		t.Errorf("sboms %+v: want cyclonedx-gomod on each binary", c.SBOMs)
	}

	// The Makefile pins the tools it installs.
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"GORELEASER_VERSION", "CYCLONEDX_GOMOD_VERSION"} {
		if !regexp.MustCompile(`(?m)^` + tool + ` = v\d+\.\d+\.\d+$`).Match(mk) {
			t.Errorf("Makefile: %s is not pinned to a version", tool)
		}
	}
	if !regexp.MustCompile(`(?m)^release:`).Match(mk) || !strings.Contains(string(mk), "scripts/release-image") {
		t.Error("Makefile: no release target running scripts/release-image")
	}
	if out, err := exec.Command("bash", "-n", "../scripts/release-image").CombinedOutput(); err != nil {
		t.Errorf("scripts/release-image: %v\n%s", err, out)
	}
	if cl, err := os.ReadFile("../CHANGELOG.md"); err != nil || !strings.Contains(string(cl), "\n## [Unreleased]\n") {
		t.Errorf("CHANGELOG.md: no Unreleased section (%v)", err)
	}
}

// mainStringVars are the package-level string variables of cmd/floodgate.
// versionPkg is the package whose variables the linker sets.
const versionPkg = "github.com/floodgate-dev/floodgate/internal/version"

func versionStringVars(t *testing.T) map[string]bool {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), "../internal/version", func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	for _, f := range pkgs["version"].Files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							vars[n.Name] = true
						}
					}
				}
			}
		}
	}
	return vars
}
