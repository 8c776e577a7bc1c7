// Command demo runs floodgate end to end on the local stack (`make demo`,
// through scripts/demo): floodgate's services and the URL shortener
// (examples/shortener) as child processes, real HTTP traffic to the
// shortener, a status line a second, a report of what was produced against
// what PostgreSQL counted, and the web dashboard checked in headless
// Chromium. It is a harness, not part of the floodgate binary.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
)

// CLI configures the demo; the stack's addresses come from `scripts/stack
// env` like everything else.
type CLI struct {
	Floodgate   string        `name:"floodgate" default:"bin/floodgate" help:"The floodgate binary the services run from."`
	Shortener   string        `name:"shortener" default:"bin/shortener" help:"The shortener binary (go build ./examples/shortener)."`
	Chromium    string        `name:"chromium" env:"FLOODGATE_CHROMIUM" default:"chromium" help:"Chromium that checks the dashboard (scripts/stack up installs it)."`
	Brokers     []string      `name:"brokers" env:"FLOODGATE_BROKERS" default:"127.0.0.1:19092" sep:"," help:"Kafka bootstrap brokers."`
	RedisAddr   string        `name:"redis-addr" env:"FLOODGATE_REDIS_ADDR" default:"127.0.0.1:16379" help:"Redis address."`
	PostgresURL string        `name:"postgres-url" env:"FLOODGATE_POSTGRES_URL" default:"postgres://floodgate@127.0.0.1:15432/floodgate?sslmode=disable" help:"PostgreSQL URL."`
	Rules       string        `name:"rules" env:"FLOODGATE_RULES" default:"examples/rules.yaml" help:"Rules file the services run with."`
	Decisions   string        `name:"decisions-topic" env:"FLOODGATE_DECISIONS_TOPIC" default:"floodgate.decisions" help:"Topic of deny decisions."`
	Duration    time.Duration `name:"duration" default:"40s" help:"How long the traffic runs."`
	VisitRate   int           `name:"visit-rate" default:"200" help:"Link visits per second, as HTTP requests to the shortener."`
	Screenshot  string        `name:"screenshot" help:"Also write the dashboard's screenshot here (make screenshot: docs/img/dashboard.png)."`
	Stay        string        `name:"stay" default:"auto" enum:"auto,yes,no" help:"Keep the services (and the dashboard) running after the report until Ctrl-C; auto: when run from a terminal."`
}

// interactive reports whether stdin looks like a terminal: a character
// device other than /dev/null (which is one too, and is what CI, nohup and
// `< /dev/null` give: a demo there must end after its report).
func interactive() bool {
	fi, err := os.Stdin.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}

func main() {
	var cli CLI
	kong.Parse(&cli, kong.Name("demo"), kong.Description("floodgate end to end: the shortener, the pipeline, the dashboard."))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stay := cli.Stay == "yes" || cli.Stay == "auto" && interactive()
	err := Run(ctx, Config{
		Floodgate: cli.Floodgate, Shortener: cli.Shortener, Chromium: cli.Chromium,
		Brokers: cli.Brokers, RedisAddr: cli.RedisAddr, PostgresURL: cli.PostgresURL, Rules: cli.Rules,
		Decisions: cli.Decisions, Duration: cli.Duration, VisitRate: cli.VisitRate, Screenshot: cli.Screenshot, Stay: stay,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}
