package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// noEnv are the flags that have no environment variable, by name, each
// with why: a value from the environment would be wrong there.
var noEnv = map[string]string{
	"help":      "kong's own: shows help",
	"version":   "kong's own: prints the version",
	"now":       "pretends the clock (tests, demos, backfills): left in an environment it would shift every answer silently",
	"reset":     "rebuild --reset deletes every live key first: a one-off decision of the operator, never a standing setting",
	"exit-code": "how one invocation reports to the script that runs it: from the environment it would change the status of every call",
}

// cliFlag is one flag of one command of the model.
type cliFlag struct {
	cmd  string // command path, "" for the root
	flag *kong.Flag
}

// cliModel is the CLI's kong model, built as run builds it.
func cliModel(t *testing.T) *kong.Application {
	t.Helper()
	var cli CLI
	p, err := newParser(&cli, kong.Exit(func(int) {}))
	if err != nil {
		t.Fatal(err)
	}
	return p.Model
}

// walkFlags returns every flag of every command, hidden ones included;
// a flag of a parent is reported once, with the parent.
func walkFlags(n *kong.Node) []cliFlag {
	var out []cliFlag
	path := ""
	if n.Type == kong.CommandNode {
		path = n.Path()
	}
	for _, f := range n.Flags {
		out = append(out, cliFlag{cmd: path, flag: f})
	}
	for _, c := range n.Children {
		out = append(out, walkFlags(c)...)
	}
	return out
}

// Every flag reads an environment variable (but the listed exceptions), and
// one variable is one concept: every flag reading it has the same name and
// the same default, so one environment file serves every command.
func TestCLIFlagsEnv(t *testing.T) {
	type use struct{ cmd, name, def string }
	byEnv := map[string][]use{}
	for _, cf := range walkFlags(cliModel(t).Node) {
		f := cf.flag
		if _, ok := noEnv[f.Name]; ok {
			if len(f.Envs) > 0 {
				t.Errorf("%s --%s: listed without an environment variable, but reads %v", cf.cmd, f.Name, f.Envs)
			}
			continue
		}
		if len(f.Envs) == 0 {
			t.Errorf("%s --%s: no environment variable (add env:\"FLOODGATE_...\", or list it in noEnv with why)", cf.cmd, f.Name)
		}
		for _, e := range f.Envs {
			if !strings.HasPrefix(e, "FLOODGATE_") {
				t.Errorf("%s --%s: environment variable %s lacks the FLOODGATE_ prefix", cf.cmd, f.Name, e)
			}
			byEnv[e] = append(byEnv[e], use{cf.cmd, f.Name, f.Default})
		}
	}
	for env, uses := range byEnv {
		for _, u := range uses[1:] {
			if u.name != uses[0].name || u.def != uses[0].def {
				t.Errorf("%s is --%s (default %q) in %q but --%s (default %q) in %q: one variable, one name and one default",
					env, uses[0].name, uses[0].def, uses[0].cmd, u.name, u.def, u.cmd)
			}
		}
	}
}

// The renamed flags and variables still take their old names.
func TestCLIOldNames(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		args []string
		got  func(*CLI) string
		want string
	}{
		{nil, []string{"aggregator", "--group", "g1"}, func(c *CLI) string { return c.Aggregator.LiveGroup }, "g1"},
		{nil, []string{"rebuild", "--group", "g1"}, func(c *CLI) string { return c.Rebuild.LiveGroup }, "g1"},
		{nil, []string{"reset", "-a", "visit", "--group", "g1", "ip=1"}, func(c *CLI) string { return c.Reset.LiveGroup }, "g1"},
		{nil, []string{"limiter", "--timeout", "20ms"}, func(c *CLI) string { return c.Limiter.Serve.RedisTimeout.String() }, "20ms"},
		{nil, []string{"topics", "--timeout", "5s"}, func(c *CLI) string { return c.Topics.Deadline.String() }, "5s"},
		{nil, []string{"migrate", "status", "--timeout", "5s"}, func(c *CLI) string { return c.Migrate.Deadline.String() }, "5s"},
		{nil, []string{"health", "--timeout", "5s", "http://x"}, func(c *CLI) string { return c.Health.Deadline.String() }, "5s"},
		{nil, []string{"setup", "--wait", "5s"}, func(c *CLI) string { return c.Setup.Deadline.String() }, "5s"},
		{nil, []string{"query", "dashboard", "-n", "3"}, func(c *CLI) string { return fmt.Sprint(c.Query.DashboardAlias.Top) }, "3"},
		{map[string]string{"FLOODGATE_METRICS_ADDR": "127.0.0.1:1"}, []string{"aggregator"}, func(c *CLI) string { return c.Aggregator.MetricsAddr }, "127.0.0.1:1"},
		{map[string]string{"FLOODGATE_METRICS_ADDR": "127.0.0.1:1", "FLOODGATE_AGGREGATOR_METRICS_ADDR": "127.0.0.1:2"}, []string{"aggregator"},
			func(c *CLI) string { return c.Aggregator.MetricsAddr }, "127.0.0.1:2"},
		{map[string]string{"FLOODGATE_TIMEOUT": "7ms"}, []string{"limiter"}, func(c *CLI) string { return c.Limiter.Serve.RedisTimeout.String() }, "7ms"},
		{map[string]string{"FLOODGATE_SETUP_WAIT": "7s"}, []string{"setup"}, func(c *CLI) string { return c.Setup.Deadline.String() }, "7s"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var cli CLI
			p, err := newParser(&cli, kong.Exit(func(int) {}))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			if got := c.got(&cli); got != c.want {
				t.Fatalf("with %v: %q, want %q", c.env, got, c.want)
			}
		})
	}
}

// The help names only the current variable of a flag.
func TestCLIHelpShowsCurrentEnv(t *testing.T) {
	code, _, stderr := runCLI(t, "aggregator", "--help")
	_, stdout, _ := runCLI(t, "aggregator", "--help")
	if code != 0 || !strings.Contains(stdout, "$FLOODGATE_AGGREGATOR_METRICS_ADDR") || strings.Contains(stdout, "$FLOODGATE_METRICS_ADDR") {
		t.Fatalf("aggregator --help (exit %d): %s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "--live-group") || strings.Contains(stdout, "--group=") {
		t.Fatalf("aggregator --help shows the old --group:\n%s", stdout)
	}
}

var update = flag.Bool("update", false, "rewrite docs/cli.md from the CLI")

// docs/cli.md is the CLI's reference, generated from the model: it fails
// when stale; `go test ./cmd/floodgate -run TestCLIReference -update` (or
// go generate ./cmd/floodgate) rewrites it.
func TestCLIReference(t *testing.T) {
	const path = "../../docs/cli.md"
	got := cliReference(cliModel(t))
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it: go generate ./cmd/floodgate)", err)
	}
	if string(want) != got {
		t.Fatalf("docs/cli.md is stale: run go generate ./cmd/floodgate (go test ./cmd/floodgate -run TestCLIReference -update)")
	}
}

// cliReference is docs/cli.md: every visible command with its flags, their
// environment variables and defaults.
func cliReference(app *kong.Application) string {
	var b strings.Builder
	b.WriteString("# floodgate command line reference\n\n")
	b.WriteString("<!-- Generated from the CLI by `go generate ./cmd/floodgate`; do not edit. -->\n\n")
	b.WriteString(app.Help + "\n\n")
	b.WriteString("Every flag but " + strings.Join(sortedKeys(noEnv), ", ") +
		" also reads the environment variable named beside it; a flag given on the command line wins. " +
		"Where several are named, the first is the current name and the others older names still read.\n\n")
	b.WriteString("## Global flags\n\n")
	writeFlagTable(&b, app.Node.Flags)
	var cmds func(n *kong.Node)
	cmds = func(n *kong.Node) {
		for _, c := range n.Children {
			if c.Hidden || c.Type != kong.CommandNode {
				continue
			}
			if len(c.Children) == 0 {
				fmt.Fprintf(&b, "## floodgate %s\n\n%s\n\n", c.Path(), c.Help)
				if d := c.Detail; d != "" {
					b.WriteString("```\n" + strings.TrimSpace(d) + "\n```\n\n")
				}
				fmt.Fprintf(&b, "    floodgate %s\n\n", c.Summary())
				var flags []*kong.Flag
				for n := c; n != nil && n.Type == kong.CommandNode; n = n.Parent {
					flags = append(n.Flags, flags...)
				}
				for _, a := range c.Positional {
					fmt.Fprintf(&b, "- `<%s>`: %s\n", a.Name, a.Help)
				}
				if len(c.Positional) > 0 {
					b.WriteString("\n")
				}
				writeFlagTable(&b, flags)
			}
			cmds(c)
		}
	}
	cmds(app.Node)
	return b.String()
}

func writeFlagTable(b *strings.Builder, flags []*kong.Flag) {
	visible := 0
	for _, f := range flags {
		if !f.Hidden {
			visible++
		}
	}
	if visible == 0 {
		b.WriteString("No flags but the global ones.\n\n")
		return
	}
	b.WriteString("| Flag | Environment | Default | Meaning |\n|---|---|---|---|\n")
	for _, f := range flags {
		if f.Hidden {
			continue
		}
		name := "`--" + f.Name + "`"
		if f.Short != 0 {
			name = "`-" + string(f.Short) + "`, " + name
		}
		for _, a := range f.Aliases {
			name += " (was `--" + a + "`)"
		}
		var envs []string
		for _, e := range f.Envs {
			envs = append(envs, "`"+e+"`")
		}
		def := ""
		if f.Default != "" {
			def = "`" + f.Default + "`"
		}
		if f.Required {
			def = "(required)"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", name, strings.Join(envs, ", "), def, strings.ReplaceAll(f.Help, "|", `\|`))
	}
	b.WriteString("\n")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, "--"+k)
	}
	sort.Strings(keys)
	return keys
}
