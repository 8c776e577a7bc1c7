package main

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// EraseCmd removes a subject from history and from the live state: the
// erasure an access or deletion request asks for (docs/history.md, "What
// is stored where, and for how long").
type EraseCmd struct {
	KafkaFlags
	RedisFlags
	PostgresFlags
	HistoryKeyFlags

	KeyPrefix string `name:"key-prefix" env:"FLOODGATE_KEY_PREFIX" default:"fg" help:"Prefix of every Redis key (as the aggregator's)."`
	Rules     string `name:"rules" env:"FLOODGATE_RULES" default:"examples/rules.yaml" help:"Rules file (YAML), as the aggregator's: the actions whose live state is reset."`
	Kind      string `name:"kind" short:"k" env:"FLOODGATE_ERASE_KIND" required:"" help:"Kind of the subject, e.g. email."`
	Subject   string `name:"subject" short:"s" env:"FLOODGATE_ERASE_SUBJECT" required:"" help:"The subject as events carry it, in any spelling the kind normalizes alike (or its ~h: hash, for history only)."`
	Action    string `name:"action" short:"a" env:"FLOODGATE_ERASE_ACTION" help:"Only this action; default: every action."`
	Operator  string `name:"operator" env:"FLOODGATE_OPERATOR" help:"Who acts, recorded in the reset's audit on the decisions topic (default: $USER)."`
	LiveGroup string `name:"live-group" aliases:"group" env:"FLOODGATE_LIVE_GROUP" default:"floodgate-live" help:"The aggregator's live consumer group (the reset records its offset as its boundary)."`
	JSON      bool   `name:"json" env:"FLOODGATE_ERASE_JSON" help:"Print the report as one JSON document."`
}

// Run erases and prints the report (what was done before a failure too).
func (c *EraseCmd) Run(ctx context.Context, logger *slog.Logger, std stdio) error {
	name := c.Operator
	if name == "" {
		name = os.Getenv("USER")
	}
	if name == "" {
		return errors.New("--operator is required (or FLOODGATE_OPERATOR, or $USER): the audit names who acted")
	}
	set, err := rules.LoadFile(c.Rules)
	if err != nil {
		return err
	}
	hasher, err := c.Hasher()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cliTimeout)
	defer cancel()
	rep, err := operator.Erase(ctx, operator.EraseConfig{
		Kind: c.Kind, Subject: c.Subject, Action: c.Action, Operator: name, Rules: set, Hasher: hasher,
		Topics: []string{c.Topic, c.DecisionsTopic, c.DLQTopic}, Group: c.LiveGroup, Topic: c.Topic, Logger: logger,
		OpenHistory: func(ctx context.Context) (history.DB, func(), error) {
			pool, err := c.PostgresFlags.Pool(ctx, logger)
			if err != nil {
				return nil, nil, err
			}
			return pool, pool.Close, nil
		},
		OpenLive: func(ctx context.Context) (*window.Store, func(), error) {
			lc, err := window.Dial(ctx, logger, &c.RedisFlags, &c.KafkaFlags, c.KeyPrefix, nil)
			if err != nil {
				return nil, nil, err
			}
			return lc.Store, func() { closeLogged(logger, "redis", lc) }, nil
		},
	})
	if rep == nil {
		return err
	}
	if perr := history.Print(std.out, rep, c.JSON); perr != nil {
		err = errors.Join(err, perr)
	}
	return err
}
