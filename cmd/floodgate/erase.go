package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
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

// eraseReport is what an erase removed; run again, every count is 0.
type eraseReport struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	// Normalized is the subject as the kind counts it (the rules file's
	// normalization), when that is not the spelling given: live state and
	// history rows since are under it.
	Normalized string `json:"normalized,omitempty"`
	Action     string `json:"action,omitempty"` // empty: every action
	// History is the rows removed per table, HistoryRows their sum.
	History     []history.Erased `json:"history"`
	HistoryRows int64            `json:"history_rows"`
	// Live is the reset of each action with rules for the kind; LiveKeys
	// the counter keys deleted plus the records cleared.
	Live     []liveErased `json:"live"`
	LiveKeys int64        `json:"live_keys"`
	// NotErased names what erase cannot reach.
	NotErased []string `json:"not_erased"`
}

type liveErased struct {
	Action      string   `json:"action"`
	Partition   int      `json:"partition"`
	DeletedKeys int64    `json:"deleted_keys"`
	Cleared     []string `json:"cleared"`
	Entry       string   `json:"entry"` // the audited change entry
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
	rep := eraseReport{Kind: c.Kind, Subject: c.Subject, Action: c.Action, History: []history.Erased{}, Live: []liveErased{},
		NotErased: []string{
			"events and decisions still in Kafka (topics " + c.Topic + ", " + c.DecisionsTopic + ", " + c.DLQTopic + ") until their retention deletes them",
			"database and Redis backups, and logs",
		}}
	if hasher == nil && set.Kind(c.Kind).History == rules.HistoryHash {
		return fmt.Errorf("kind %s is stored hashed in history: --history-key-file is needed to find its rows", c.Kind)
	}
	if !history.IsHashed(c.Subject) {
		if n := set.Normalize(c.Kind, c.Subject); n != c.Subject {
			rep.Normalized = n
		}
	}
	if set.Kind(c.Kind).Normalize != 0 {
		rep.NotErased = append(rep.NotErased, "history rows and live counters under other spellings of the subject, written before kind "+c.Kind+
			" was normalized (by an older version, or a rules file with normalize: none): erase each spelling; live counters expire with their windows")
	}
	err = c.eraseHistory(ctx, logger, hasher, set, &rep)
	if err == nil {
		err = c.eraseLive(ctx, logger, set, name, hasher, &rep)
	}
	if perr := c.print(std.out, rep); perr != nil {
		err = errors.Join(err, perr)
	}
	return err
}

func (c *EraseCmd) eraseHistory(ctx context.Context, logger *slog.Logger, h *history.Hasher, set *rules.Set, rep *eraseReport) error {
	pool, err := c.PostgresFlags.Pool(ctx, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The rows of the subject as given and as normalized (rows from
	// before the kind was normalized keep their spelling).
	erased, err := history.Erase(ctx, pool, h, set, c.Kind, c.Subject, c.Action)
	if err != nil {
		return err
	}
	rep.History = erased
	for _, e := range erased {
		rep.HistoryRows += e.Rows
	}
	logger.Info("erased from history", "kind", c.Kind, "action", c.Action, "rows", rep.HistoryRows)
	return nil
}

// eraseLive resets the subject (counters, deny and shadow records, bans,
// decision state) for every action whose rules count its kind: the
// operator's reset, audited on the decisions topic.
func (c *EraseCmd) eraseLive(ctx context.Context, logger *slog.Logger, set *rules.Set, name string, h *history.Hasher, rep *eraseReport) error {
	if history.IsHashed(c.Subject) {
		rep.NotErased = append(rep.NotErased, "live state: the subject was given as its hash, and live state keys subjects by value")
		return nil
	}
	var actions []string
	for _, r := range set.Rules() {
		if (c.Action == "" || r.Action == c.Action) && slices.Contains(r.Kinds, c.Kind) && !slices.Contains(actions, r.Action) {
			actions = append(actions, r.Action)
		}
	}
	slices.Sort(actions)
	if len(actions) == 0 {
		return nil // no rule counts the kind: no live state
	}
	lc, err := window.Dial(ctx, logger, &c.RedisFlags, &c.KafkaFlags, c.KeyPrefix, nil)
	if err != nil {
		return err
	}
	defer closeLogged(logger, "redis", lc)
	store := lc.Store
	writer, err := operator.NewWriter(store)
	if err != nil {
		return err
	}
	// The reset's log line names the subject as history stores it hashed
	// when the key is given (nobody can test a guess against it), else by
	// its digest: never as given, which the erasure is about.
	var pseudonym func(string) string
	if h != nil {
		pseudonym = h.Subject
	}
	op, err := operator.New(operator.Config{Store: store, Writer: writer, Rules: func() *rules.Set { return set }, Group: c.LiveGroup, Topic: c.Topic,
		Pseudonym: pseudonym, Logger: logger})
	if err != nil {
		return err
	}
	for _, a := range actions {
		res, err := op.Reset(ctx, operator.Request{Action: a, Operator: name, Subjects: []limitapi.Subject{{Kind: c.Kind, Subject: c.Subject}}})
		if err != nil {
			return err
		}
		for _, s := range res.Subjects {
			cleared := s.Cleared
			if cleared == nil {
				cleared = []string{}
			}
			rep.Live = append(rep.Live, liveErased{Action: a, Partition: s.Partition, DeletedKeys: s.DeletedKeys, Cleared: cleared, Entry: s.Entry})
			rep.LiveKeys += s.DeletedKeys + int64(len(s.Cleared))
		}
	}
	return nil
}

func (c *EraseCmd) print(w io.Writer, rep eraseReport) error {
	if c.JSON {
		return writeJSON(w, rep)
	}
	var b strings.Builder
	scope := "every action"
	if rep.Action != "" {
		scope = "action " + rep.Action
	}
	fmt.Fprintf(&b, "erase %s %s (%s)\n", rep.Kind, rep.Subject, scope)
	if rep.Normalized != "" {
		fmt.Fprintf(&b, "counted as: %s\n", rep.Normalized)
	}
	fmt.Fprintf(&b, "history: %d rows\n", rep.HistoryRows)
	for _, e := range rep.History {
		fmt.Fprintf(&b, "  %-16s %d rows (%d events)\n", e.Table, e.Rows, e.Events)
	}
	fmt.Fprintf(&b, "live: %d keys\n", rep.LiveKeys)
	for _, l := range rep.Live {
		cleared := strings.Join(l.Cleared, ",")
		if cleared == "" {
			cleared = "nothing"
		}
		fmt.Fprintf(&b, "  %-16s partition %d: %d counter keys deleted, cleared %s (audit entry %s)\n", l.Action, l.Partition, l.DeletedKeys, cleared, l.Entry)
	}
	b.WriteString("not erased:\n")
	for _, n := range rep.NotErased {
		fmt.Fprintf(&b, "  %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
