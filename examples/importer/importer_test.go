// Package importer_test is a newcomer's first step: a module of its own
// that requires floodgate and builds against its public client. It holds
// what the module promises an importer: the client links no server code,
// the importer's module graph stays small, and the module can be installed
// with go install (no replace directive in floodgate's go.mod).
package importer_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/floodgate-dev/floodgate"

// maxModules bounds `go list -m all` of an importer of the client: the
// module's own requirements (what its servers need) and the importer. At
// the re-layout it was 48; before it, with test-only dependencies (Chromium,
// Kubernetes, compose) in the module's go.mod, 82.
const maxModules = 52

func TestAnImporterBuildsTheClient(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(gomod), "module "+module+"\n") {
		t.Fatalf("go.mod does not declare module %s", module)
	}
	for _, l := range strings.Split(string(gomod), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "replace") {
			t.Fatalf("go.mod has a replace directive (%q): `go install %s/cmd/floodgate@latest` refuses a module with one", l, module)
		}
	}

	dir := t.TempDir()
	write(t, filepath.Join(dir, "go.mod"), "module example.com/importer\n\ngo 1.26.8\n\nrequire "+module+" v0.0.0\n\nreplace "+module+" => "+root+"\n")
	write(t, filepath.Join(dir, "main.go"), `package main

import (
	"context"
	"fmt"

	"github.com/floodgate-dev/floodgate/limiter/limitapi"
	"github.com/floodgate-dev/floodgate/limiter/limiterclient"
)

func main() {
	c, err := limiterclient.New(limiterclient.Config{BaseURL: "http://127.0.0.1:8080"})
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Check(context.Background(), limitapi.Request{Action: "login_failed"}))
}
`)
	gocmd(t, dir, "mod", "tidy")
	gocmd(t, dir, "build", "./...")
	mods := strings.Fields(gocmd(t, dir, "list", "-m", "-f", "{{.Path}}", "all"))
	t.Logf("an importer of limiterclient: %d modules", len(mods))
	if len(mods) > maxModules {
		t.Errorf("an importer's module graph holds %d modules, more than %d: %v", len(mods), maxModules, mods)
	}
	for _, m := range mods {
		for _, testOnly := range []string{"chromedp", "compose-spec", "k8s.io", "prometheus-operator", "kustomize", "HdrHistogram"} {
			if strings.Contains(m, testOnly) {
				t.Errorf("test-only module %s reaches an importer's graph", m)
			}
		}
	}
	deps := gocmd(t, dir, "list", "-deps", "-f", "{{.ImportPath}}", ".")
	for _, server := range []string{"go-redis", "kafka-go", "jackc/pgx", "prometheus/client_golang", module + "/internal/rules", module + "/internal/decide"} {
		if strings.Contains(deps, server) {
			t.Errorf("the client links %s", server)
		}
	}
}

func gocmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
