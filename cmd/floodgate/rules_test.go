package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/floodgate-dev/floodgate/internal/rules"
)

// runCLI runs the binary on args as main does, returning the exit code and
// what it printed.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	type exited struct{ code int }
	var out, errOut strings.Builder
	func() {
		defer func() {
			if r := recover(); r != nil {
				e, ok := r.(exited)
				if !ok {
					panic(r)
				}
				code = e.code
			}
		}()
		code = run(args, &out, &errOut, func(c int) { panic(exited{c}) })
	}()
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRulesCheck(t *testing.T) {
	t.Run("example file", func(t *testing.T) {
		code, out, errOut := runCLI(t, "rules", "check", "../../examples/rules.yaml")
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		for _, want := range []string{
			"ACTION", "login_failed    email  login-failed         limits: 2/1s 5/1m 10/1h 100/1d",
			"credential-stuffing  distinct email: 20/1h", "bucket: {rate: 10/1s, burst: 50}",
			"link-visit           limits: 50/1s 600/1m 20000/1h                       shadow   0",
			"password_reset  ip     password-reset       limits: 1/1m 3/1h 10/1d                             strict   0",
			"KIND   NORMALIZE      IPV6_PREFIX", "email  [trim, lower]  -", "ip     [trim, ip]     64", "user   none           -",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		if n := strings.Count(out, "\n"); n != 14 {
			t.Errorf("%d lines, want a header and 8 (rule, action, kind), a blank line, a header and 3 kinds:\n%s", n, out)
		}
	})
	t.Run("warnings", func(t *testing.T) {
		path := writeFile(t, "rules.yaml", `rules:
  - {name: a, action: x, kinds: [ip], limits: [5/m]}
  - {name: b, action: x, kinds: [ip], limits: [10/m]}
`)
		code, _, errOut := runCLI(t, "rules", "check", path)
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		for _, want := range []string{path + `:3: warning: overlap: rules "a" and "b"`, path + `:3: warning: unreachable: rule "b"`} {
			if !strings.Contains(errOut, want) {
				t.Errorf("stderr lacks %q:\n%s", want, errOut)
			}
		}
	})
	t.Run("unknown normalize step", func(t *testing.T) {
		path := writeFile(t, "rules.yaml", "rules:\n  - {name: a, action: x, kinds: [email], limits: [5/m]}\nkinds:\n  email: {normalize: [trim, casefold]}\n")
		code, out, errOut := runCLI(t, "rules", "check", path)
		if code != 1 || out != "" || !strings.Contains(errOut, path+`:4: kinds: email: normalize: unknown step "casefold" (want trim, lower, ip, or none)`) {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	t.Run("broken file", func(t *testing.T) {
		path := writeFile(t, "rules.yaml", "rules:\n  - {name: a, action: x, kinds: [ip], limits: [5/x]}\n")
		code, out, errOut := runCLI(t, "rules", "check", path)
		if code != 1 || out != "" {
			t.Fatalf("exit %d, stdout %q", code, out)
		}
		if want := path + `:2: rule "a": limit "5/x"`; !strings.Contains(errOut, want) {
			t.Errorf("stderr %q lacks %q", errOut, want)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		if code, _, errOut := runCLI(t, "rules", "check", filepath.Join(t.TempDir(), "nope.yaml")); code != 1 || !strings.Contains(errOut, "no such file") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
}

// Run outside the repository (as tests are, in cmd/floodgate), a command
// left with the default --rules says why the file is missing, before it
// connects to anything.
func TestDefaultRulesMissing(t *testing.T) {
	t.Setenv("FLOODGATE_RULES", "")
	os.Unsetenv("FLOODGATE_RULES")
	for _, args := range [][]string{
		{"limiter", "serve", "--http-addr", "127.0.0.1:0", "--rls-addr", "off"},
		{"aggregator", "--metrics-addr", "127.0.0.1:0"},
		{"rebuild"},
		{"inspect", "-a", "login_failed", "ip=203.0.113.7"},
	} {
		code, _, errOut := runCLI(t, args...)
		want := "rules file examples/rules.yaml not found (the default is relative to the repository; pass --rules or FLOODGATE_RULES)"
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	// Every --rules default is that one.
	var cli CLI
	p, err := kong.New(&cli, kong.Name("floodgate"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var walk func(*kong.Node)
	walk = func(node *kong.Node) {
		for _, f := range node.Flags {
			if f.Name == "rules" && f.Default != "" {
				n++
				if f.Default != rules.DefaultPath {
					t.Errorf("%s --rules defaults to %q, not %q", node.Path(), f.Default, rules.DefaultPath)
				}
			}
		}
		for _, c := range node.Children {
			walk(c)
		}
	}
	walk(p.Model.Node)
	if n < 4 {
		t.Errorf("%d --rules flags with a default, want the limiter's, aggregator's, rebuild's and the operator commands'", n)
	}
}

// Exit codes: 0 done, 1 failed, 2 a command line kong refused; the usage
// goes to stderr with the error.
func TestExitCodes(t *testing.T) {
	broken := writeFile(t, "rules.yaml", "rules: [1]\n")
	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"--help"}, 0},
		{[]string{"rules", "check", "--help"}, 0},
		{[]string{"version"}, 0},
		{[]string{"rules", "check", "../../examples/rules.yaml"}, 0},
		{[]string{"rules", "check", broken}, 1},
		{[]string{"--bogus"}, 2},
		{[]string{"no-such-command"}, 2},
		{[]string{"rules", "check"}, 2},
		{[]string{"rules", "check", "a.yaml", "b.yaml"}, 2},
		{[]string{"limiter", "--rls-mode", "sometimes"}, 2},
		{[]string{"migrate", "sideways"}, 2},
	} {
		code, out, errOut := runCLI(t, tt.args...)
		if code != tt.code {
			t.Errorf("%v: exit %d, want %d; stderr %q", tt.args, code, tt.code, errOut)
		}
		if tt.code == 2 {
			if out != "" || !strings.Contains(errOut, "floodgate: error: ") || !strings.Contains(errOut, "Usage: floodgate") {
				t.Errorf("%v: stdout %q, stderr %q: want the error and the usage on stderr only", tt.args, out, errOut)
			}
		}
	}
}
