// Package readme_test follows the README as a newcomer would: it runs the
// block of "Your first 429" with bash, as written, and checks that Envoy's
// request and nginx both get their 429 on the first try.
package readme_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
)

const marker = "<!-- first-429:"

// block returns the shell block that follows the marker in README.md.
func block(t *testing.T, readme string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, marker)
	if !ok {
		t.Fatalf("README.md has no %q block", marker)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatal("README.md: no ```sh block after the first-429 marker")
	}
	body, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("README.md: the first-429 block is not closed")
	}
	return body
}

// replace substitutes each old string, all of it required: a README that no
// longer says what the test moves would be run unmoved, or not at all.
func replace(t *testing.T, what, s string, pairs ...string) string {
	t.Helper()
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("%s no longer contains %q: update this test with it", what, pairs[i])
		}
		s = strings.ReplaceAll(s, pairs[i], pairs[i+1])
	}
	return s
}

func TestFirst429(t *testing.T) {
	stacktest.Redis(t) // the stack is up, or the test says how to start it
	nginx := stacktest.Nginx(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	httpAddr, rlsAddr, adminAddr := servicetest.FreeAddr(t), servicetest.FreeAddr(t), servicetest.FreeAddr(t)
	nginxAddr, siteAddr := servicetest.FreeAddr(t), servicetest.FreeAddr(t)

	// nginx's files beside each other in a directory of the test's own,
	// the addresses moved.
	conf, err := os.ReadFile(filepath.Join(root, "examples/nginx/quickstart.conf"))
	if err != nil {
		t.Fatal(err)
	}
	confText := replace(t, "examples/nginx/quickstart.conf", string(conf),
		"127.0.0.1:8080", httpAddr, "127.0.0.1:8088", nginxAddr, "127.0.0.1:8089", siteAddr)
	if err := os.WriteFile(filepath.Join(dir, "quickstart.conf"), []byte(confText), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"floodgate-take.conf", "floodgate-take-params.conf"} {
		b, err := os.ReadFile(filepath.Join(root, "examples/nginx", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	prefixDir := filepath.Join(dir, "nginx")
	if err := os.Mkdir(prefixDir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := replace(t, "README.md's first-429 block", block(t, string(readme)),
		"bin/floodgate", filepath.Join(dir, "floodgate"),
		"127.0.0.1:8080", httpAddr,
		"127.0.0.1:8088", nginxAddr,
		`"$PWD/.stack"`, prefixDir,
		`"$PWD/examples/nginx/quickstart.conf"`, filepath.Join(dir, "quickstart.conf"),
	)
	stopNginx := nginx + " -p " + prefixDir + " -e stderr -c " + filepath.Join(dir, "quickstart.conf") + " -s stop"
	script = "set -e\ntrap 'set +e; " + stopNginx + " 2>/dev/null; kill $(jobs -p) 2>/dev/null; wait || true' EXIT\n" + script

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A process the block leaves behind would hold the output open.
	cmd.WaitDelay = 10 * time.Second
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	// Every flag the README leaves at its default reads the environment:
	// the limiter's other listeners and its Redis keys are the test's own.
	cmd.Env = append(os.Environ(),
		"PATH="+filepath.Dir(nginx)+":"+os.Getenv("PATH"),
		"FLOODGATE_HTTP_ADDR="+httpAddr,
		"FLOODGATE_RLS_ADDR="+rlsAddr,
		"FLOODGATE_ADMIN_ADDR="+adminAddr,
		"FLOODGATE_KEY_PREFIX="+stacktest.Prefix(t, stacktest.Redis(t)),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Logf("stdout:\n%s", stdout.String())
	if err != nil {
		t.Fatalf("the README's block failed: %v\nstderr:\n%s", err, stderr.String())
	}

	var probe, codes []string
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		switch {
		case strings.Contains(line, "OK: Envoy passes"), strings.Contains(line, "OVER_LIMIT"):
			probe = append(probe, line)
		case len(line) == 3:
			codes = append(codes, line)
		}
	}
	if len(probe) != 6 || strings.Contains(strings.Join(probe[:5], "\n"), "OVER_LIMIT") || !strings.Contains(probe[5], "OVER_LIMIT: Envoy answers 429") || !strings.Contains(probe[5], "Retry-After") {
		t.Errorf("Envoy's requests: want five OK then OVER_LIMIT with Retry-After, got\n%s\nstderr:\n%s", strings.Join(probe, "\n"), stderr.String())
	}
	if strings.Join(codes, " ") != "200 200 200 200 200 429" {
		t.Errorf("nginx: want 200 five times then 429, got %v\nstderr:\n%s", codes, stderr.String())
	}
}
