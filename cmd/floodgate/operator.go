package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/floodgate-dev/floodgate/internal/adminapi"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// The operator commands (docs/operations.md) talk to Redis directly through
// the same window scripts as the limiter's admin endpoints: they need no
// running limiter, and every running limiter sees their writes through the
// change streams. With --admin-url they go through a limiter's admin
// endpoints instead, so an operator needs no Redis or Kafka credentials.

// operatorControls are what the operator commands run: *operator.Operator
// on the store, or *adminapi.Client through a limiter's admin endpoints.
type operatorControls interface {
	Inspect(ctx context.Context, req operator.Request) (operator.Inspection, error)
	Ban(ctx context.Context, req operator.Request) (operator.Result, error)
	Unban(ctx context.Context, req operator.Request) (operator.Result, error)
	Reset(ctx context.Context, req operator.Request) (operator.Result, error)
}

var (
	_ operatorControls = (*operator.Operator)(nil)
	_ operatorControls = (*adminapi.Client)(nil)
)

// operatorFlags locate the live store and name the subjects.
type operatorFlags struct {
	KafkaFlags
	RedisFlags
	adminClientFlags
	KeyPrefix string   `name:"key-prefix" env:"FLOODGATE_KEY_PREFIX" default:"fg" help:"Prefix of every Redis key (as the aggregator's)."`
	Rules     string   `name:"rules" env:"FLOODGATE_RULES" default:"examples/rules.yaml" help:"Rules file (YAML), as the aggregator's and the limiter's."`
	Action    string   `name:"action" short:"a" env:"FLOODGATE_OPERATOR_ACTION" required:"" help:"Action of the subjects, e.g. login_failed."`
	Subjects  []string `arg:"" name:"kind=subject" help:"Subjects as kind=value, e.g. ip=203.0.113.7 email=a@example.com (a value may hold '=')."`
	JSON      bool     `name:"json" env:"FLOODGATE_OPERATOR_JSON" help:"Print the result as JSON."`
}

// writeFlags are the settings of the commands that change something.
type writeFlags struct {
	Operator  string `name:"operator" env:"FLOODGATE_OPERATOR" help:"Who acts, recorded in the audit on the decisions topic (default: $USER)."`
	LiveGroup string `name:"live-group" aliases:"group" env:"FLOODGATE_LIVE_GROUP" default:"floodgate-live" help:"The aggregator's live consumer group (a reset records its offset as its boundary)."`
}

// InspectCmd shows what is known of subjects and what a check answers.
type InspectCmd struct {
	operatorFlags
	exitCodeFlag
}

// BanCmd denies subjects for a while whatever their counts.
type BanCmd struct {
	operatorFlags
	writeFlags
	For     string `name:"for" env:"FLOODGATE_BAN_FOR" required:"" help:"How long: 90s, 30m, 1h, 1h30m, 2d (at most 366d)."`
	Message string `name:"message" short:"m" env:"FLOODGATE_BAN_MESSAGE" help:"What denied requests are told (default: the limiter's)."`
}

// Validate refuses a --for that does not parse: a usage error (exit 2).
func (c *BanCmd) Validate() error {
	if _, err := operator.ParseFor(c.For); err != nil {
		return fmt.Errorf("--for: %w", err)
	}
	return nil
}

// UnbanCmd clears subjects' deny records, bans and decision state.
type UnbanCmd struct {
	operatorFlags
	writeFlags
	Rule string `name:"rule" env:"FLOODGATE_UNBAN_RULE" help:"Only this rule's deny and shadow records and state (a ban stays)."`
}

// ResetCmd unbans subjects and deletes their counters.
type ResetCmd struct {
	operatorFlags
	writeFlags
}

// Run inspects.
func (c *InspectCmd) Run(ctx context.Context, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	op, req, done, err := c.open(ctx, logger, "")
	if err != nil {
		return err
	}
	defer done()
	in, err := op.Inspect(ctx, req)
	if err != nil {
		return err
	}
	if err := c.print(in, in.Text()); err != nil {
		return err
	}
	if n := deniedSubjects(in); c.ExitCode && n > 0 {
		return foundError{fmt.Sprintf("%d subjects denied or banned", n)}
	}
	return nil
}

// deniedSubjects counts what inspect --exit-code gates on: subjects with a
// deny record or a ban (a shadow record denies nobody).
func deniedSubjects(in operator.Inspection) int {
	n := 0
	for _, s := range in.Subjects {
		if s.Deny != nil || s.Ban != nil {
			n++
		}
	}
	return n
}

// Run bans.
func (c *BanCmd) Run(ctx context.Context, logger *slog.Logger) error {
	d, err := operator.ParseFor(c.For)
	if err != nil {
		return fmt.Errorf("--for: %w", err)
	}
	return c.write(ctx, logger, c.writeFlags, func(ctx context.Context, op operatorControls, req operator.Request) (operator.Result, error) {
		req.For, req.Message = d, c.Message
		return op.Ban(ctx, req)
	})
}

// Run unbans.
func (c *UnbanCmd) Run(ctx context.Context, logger *slog.Logger) error {
	return c.write(ctx, logger, c.writeFlags, func(ctx context.Context, op operatorControls, req operator.Request) (operator.Result, error) {
		req.Rule = c.Rule
		return op.Unban(ctx, req)
	})
}

// Run resets.
func (c *ResetCmd) Run(ctx context.Context, logger *slog.Logger) error {
	return c.write(ctx, logger, c.writeFlags, func(ctx context.Context, op operatorControls, req operator.Request) (operator.Result, error) {
		return op.Reset(ctx, req)
	})
}

// write runs one write command and prints what it did (what it did before
// a failure, too).
func (c *operatorFlags) write(ctx context.Context, logger *slog.Logger, w writeFlags, run func(context.Context, operatorControls, operator.Request) (operator.Result, error)) error {
	name := w.Operator
	if c.AdminURL != "" && name != "" {
		return errors.New("--operator (FLOODGATE_OPERATOR) does not apply with --admin-url: the audit names the admin token's operator")
	}
	if name == "" && c.AdminURL == "" {
		name = os.Getenv("USER")
		if name == "" {
			return errors.New("--operator is required (or FLOODGATE_OPERATOR, or $USER): the audit names who acted")
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	o, req, done, err := c.open(ctx, logger, w.LiveGroup)
	if err != nil {
		return err
	}
	defer done()
	req.Operator = name
	res, err := run(ctx, o, req)
	if len(res.Subjects) > 0 {
		if perr := c.print(res, res.Text()); perr != nil {
			err = errors.Join(err, perr)
		}
	}
	return err
}

// cliTimeout bounds a command's work, so a stuck Redis or Kafka ends it.
const cliTimeout = 30 * time.Second

// open connects to Redis and Kafka (the partition count finds each
// subject's slot) and returns an Operator with the request's subjects; with
// --admin-url, a client of that limiter's admin endpoints.
func (c *operatorFlags) open(ctx context.Context, logger *slog.Logger, group string) (operatorControls, operator.Request, func(), error) {
	req := operator.Request{Action: c.Action}
	var err error
	if req.Subjects, err = operator.ParseSubjects(c.Subjects); err != nil {
		return nil, req, nil, err
	}
	if c.AdminURL != "" {
		ac, err := c.adminClient(logger)
		if err != nil {
			return nil, req, nil, err
		}
		return ac, req, func() {}, nil
	}
	set, err := rules.LoadFile(c.Rules)
	if err != nil {
		return nil, req, nil, err
	}
	lc, err := window.Dial(ctx, logger, &c.RedisFlags, &c.KafkaFlags, c.KeyPrefix, nil)
	if err != nil {
		return nil, req, nil, err
	}
	done := func() { closeLogged(logger, "redis", lc) }
	o, err := operator.NewLocal(lc.Store, set, group, c.Topic, logger)
	if err != nil {
		done()
		return nil, req, nil, err
	}
	return o, req, done, nil
}

func (c *operatorFlags) print(v any, text string) error {
	if !c.JSON {
		_, err := fmt.Print(text)
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
