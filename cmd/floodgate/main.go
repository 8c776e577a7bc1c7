// Command floodgate is the single binary of floodgate: it wires configuration
// to the packages that do the work. Each subcommand lives in its own file and
// holds no logic of its own.
package main

//go:generate go test -run ^TestCLIReference$ -update

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/floodgate-dev/floodgate/internal/version"
)

// CLI is the whole configuration surface of the binary. Every flag has an
// environment fallback (the exceptions and why: noEnv in cli_test.go) and
// a default that points at the local stack started by scripts/stack. A
// setting the processes share is FLOODGATE_<FLAG> wherever it appears, so
// one environment file serves every command; one that must differ per
// process, or whose default differs per command, is
// FLOODGATE_<COMMAND>_<FLAG>. A renamed flag keeps its old name as a
// hidden alias and its old variable after the new one. docs/cli.md is
// generated from this model (go generate).
type CLI struct {
	LogLevel  slog.Level       `name:"log-level" env:"FLOODGATE_LOG_LEVEL" default:"info" help:"Log level: debug, info, warn, error."`
	LogFormat string           `name:"log-format" env:"FLOODGATE_LOG_FORMAT" default:"text" enum:"text,json" help:"Log format: text or json."`
	Version   kong.VersionFlag `name:"version" help:"Print the version and exit."`

	Produce    ProduceCmd    `cmd:"" help:"Publish access events: NDJSON from stdin, or synthetic load."`
	Topics     TopicsCmd     `cmd:"" help:"Create floodgate's Kafka topics (idempotent)."`
	Aggregator AggregatorCmd `cmd:"" help:"Consume events into Redis live counters and Postgres minute buckets."`
	Limiter    LimiterCmd    `cmd:"" help:"Serve limiter lookups over gRPC/Connect, HTTP and Envoy RLS."`
	Roller     RollerCmd     `cmd:"" help:"Apply the retention ladder to history."`
	Migrate    MigrateCmd    `cmd:"" help:"Apply or show database migrations."`
	Query      QueryCmd      `cmd:"" help:"Print analytics answers: count, curve, top, total, visitors, and the dashboard page as text (summary)."`
	Dashboard  DashboardCmd  `cmd:"" help:"Serve the web dashboard: totals, top subjects, curves, recent deny decisions."`
	Rebuild    RebuildCmd    `cmd:"" help:"Rebuild live Redis counters offline by replaying Kafka (a running aggregator recounts what Redis lost by itself; for --evaluate-all, or with the aggregators stopped)."`
	Rules      RulesCmd      `cmd:"" help:"Check a rules file: validate it, print what it enforces, warn on overlaps."`
	Backtest   BacktestCmd   `cmd:"" help:"Replay the events topic through a rules file: whom it would have denied, and what changes against the rules in force."`
	Inspect    InspectCmd    `cmd:"" help:"Show a subject's counts, deny, shadow and ban records, and what a check answers now and why."`
	Ban        BanCmd        `cmd:"" help:"Deny subjects for a while whatever their counts (audited, seen by every limiter)."`
	Unban      UnbanCmd      `cmd:"" help:"Clear subjects' deny records, bans and decision state; their counts stay (audited)."`
	Reset      ResetCmd      `cmd:"" help:"Unban subjects and delete their counters: they start afresh (audited)."`
	Erase      EraseCmd      `cmd:"" help:"Remove a subject from history and live state, and report what was removed (audited)."`
	Setup      SetupCmd      `cmd:"" help:"Create topics and apply migrations, waiting for the services (one-shot deploy step)."`
	Health     HealthCmd     `cmd:"" help:"Probe a health URL (for container health checks)."`
	VersionCmd VersionCmd    `cmd:"" name:"version" help:"Print the version: module version, commit, build date."`
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, os.Exit)) }

// Exit codes: 0 done, 1 the command failed, 2 the command line is wrong
// (kong's own default for those, 80, is no convention anyone checks), 3
// the command found what a script gates on (asked for with --exit-code,
// as git diff --exit-code does: without it a finding is an answer like
// any other, and scripts written before the flag keep their 0).
const (
	exitFailed = 1
	exitUsage  = 2
	exitFound  = 3
)

// exitDoc is the exit status paragraph of --help and docs/cli.md.
const exitDoc = "Exit status: 0 done, 1 the command failed, 2 the command line is wrong (unknown flag, missing argument, bad value), " +
	"3 found, with --exit-code: backtest found subjects newly denied against --baseline, inspect found a deny or a ban, migrate status found pending migrations."

// foundError ends a command that found what --exit-code asked about; its
// report is printed already, the error says what was found (on stderr).
type foundError struct{ what string }

func (e foundError) Error() string { return "found " + e.what }
func (foundError) ExitCode() int   { return exitFound }

// exitCodeFlag is --exit-code of the commands that can find something.
type exitCodeFlag struct {
	ExitCode bool `name:"exit-code" help:"Exit with status 3 when something is found (see Exit status in floodgate --help), 0 when not."`
}

// usageError is a command line kong refused (unknown flag or command, a
// missing argument, a value that does not parse or is not in its enum).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }
func (usageError) ExitCode() int   { return exitUsage }

// stdio are the streams a command prints to (os.Stdout and os.Stderr but
// in tests); commands take it as a Run argument.
type stdio struct{ out, err io.Writer }

// run parses args and runs the command, returning the exit code. exit is
// called instead for --help, --version and usage errors (kong's way out).
func run(args []string, stdout, stderr io.Writer, exit func(int)) int {
	var cli CLI
	parser, err := newParser(&cli, kong.Writers(stdout, stderr), kong.Exit(exit))
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: %v\n", err)
		return exitFailed
	}
	kctx, err := parser.Parse(args)
	if err != nil {
		// The usage goes with the error to stderr: stdout stays what the
		// command prints (a script reading it gets nothing, not help).
		parser.Stdout = stderr
		parser.FatalIfErrorf(usageError{err})
		return exitUsage
	}
	logger := newLogger(stderr, cli.LogLevel, cli.LogFormat)
	slog.SetDefault(logger)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kctx.BindTo(ctx, (*context.Context)(nil))
	kctx.Bind(logger)
	kctx.Bind(stdio{out: stdout, err: stderr})
	if err := kctx.Run(); err != nil {
		fmt.Fprintf(stderr, "floodgate %s: %v\n", kctx.Command(), err)
		var found foundError
		if errors.As(err, &found) {
			return exitFound
		}
		return exitFailed
	}
	return 0
}

// newParser builds the parser of cli as run uses it; the CLI tests and
// the reference generator (docs/cli.md) walk the same model.
func newParser(cli *CLI, opts ...kong.Option) (*kong.Kong, error) {
	return kong.New(cli, append([]kong.Option{
		kong.Name("floodgate"),
		kong.Description("Live rate limiting and access analytics from one Kafka stream.\n\n" + exitDoc),
		kong.UsageOnError(),
		kong.Vars{"version": version.Read().String()},
		kong.ValueFormatter(helpValue),
		durationFlags, // every time.Duration flag reads the timespan grammar (2d, 1w)
	}, opts...)...)
}

// helpValue is kong's help text of a flag with only its first environment
// variable: the others are older names still read, listed in docs/cli.md.
func helpValue(v *kong.Value) string {
	if len(v.Tag.Envs) < 2 {
		return kong.DefaultHelpValueFormatter(v)
	}
	envs := v.Tag.Envs
	defer func() { v.Tag.Envs = envs }()
	v.Tag.Envs = envs[:1]
	return kong.DefaultHelpValueFormatter(v)
}

func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func closeLogged(logger *slog.Logger, what string, c io.Closer) {
	if err := c.Close(); err != nil {
		logger.Warn("close "+what, "err", err)
	}
}
