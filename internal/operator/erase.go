package operator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// EraseConfig is what Erase removes, and how it reaches history and the
// live state. The connections are opened only when needed, so that a
// report says what was done before one failed.
type EraseConfig struct {
	Kind, Subject string
	Action        string // empty: every action
	Operator      string // who acts, recorded in the reset's audit
	Rules         *rules.Set
	Hasher        *history.Hasher // nil: no history key
	// Topics are the Kafka topics events and decisions stay in until
	// their retention deletes them (the report names them).
	Topics []string
	// Group and Topic are the aggregator's live consumer group and events
	// topic: the reset records the group's offset as its boundary.
	Group, Topic string
	// OpenHistory opens the history database; OpenLive the live store.
	// Each returns what closes it.
	OpenHistory func(context.Context) (history.DB, func(), error)
	OpenLive    func(context.Context) (*window.Store, func(), error)
	Logger      *slog.Logger
}

// EraseReport is what an erase removed; run again, every count is 0.
type EraseReport struct {
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
	Live     []LiveErased `json:"live"`
	LiveKeys int64        `json:"live_keys"`
	// NotErased names what erase cannot reach.
	NotErased []string `json:"not_erased"`
}

// LiveErased is the reset of one action's live state of the subject.
type LiveErased struct {
	Action      string   `json:"action"`
	Partition   int      `json:"partition"`
	DeletedKeys int64    `json:"deleted_keys"`
	Cleared     []string `json:"cleared"`
	Entry       string   `json:"entry"` // the audited change entry
}

// Erase removes a subject from history and from the live state: the
// erasure an access or deletion request asks for (docs/history.md, "What
// is stored where, and for how long"). Once it started, its report says
// what was done, also before a failure; before, it is nil.
func Erase(ctx context.Context, c EraseConfig) (*EraseReport, error) {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	rep := &EraseReport{Kind: c.Kind, Subject: c.Subject, Action: c.Action, History: []history.Erased{}, Live: []LiveErased{},
		NotErased: []string{
			"events and decisions still in Kafka (topics " + strings.Join(c.Topics, ", ") + ") until their retention deletes them",
			"database and Redis backups, and logs",
		}}
	if c.Hasher == nil && c.Rules.Kind(c.Kind).History == rules.HistoryHash {
		return nil, fmt.Errorf("kind %s is stored hashed in history: --history-key-file is needed to find its rows", c.Kind)
	}
	if !history.IsHashed(c.Subject) {
		if n := c.Rules.Normalize(c.Kind, c.Subject); n != c.Subject {
			rep.Normalized = n
		}
	}
	if c.Rules.Kind(c.Kind).Normalize != 0 {
		rep.NotErased = append(rep.NotErased, "history rows and live counters under other spellings of the subject, written before kind "+c.Kind+
			" was normalized (by an older version, or a rules file with normalize: none): erase each spelling; live counters expire with their windows")
	}
	err := c.eraseHistory(ctx, rep)
	if err == nil {
		err = c.eraseLive(ctx, rep)
	}
	return rep, err
}

func (c *EraseConfig) eraseHistory(ctx context.Context, rep *EraseReport) error {
	db, done, err := c.OpenHistory(ctx)
	if err != nil {
		return err
	}
	defer done()
	// The rows of the subject as given and as normalized (rows from
	// before the kind was normalized keep their spelling).
	erased, err := history.Erase(ctx, db, c.Hasher, c.Rules, c.Kind, c.Subject, c.Action)
	if err != nil {
		return err
	}
	rep.History = erased
	for _, e := range erased {
		rep.HistoryRows += e.Rows
	}
	c.Logger.Info("erased from history", "kind", c.Kind, "action", c.Action, "rows", rep.HistoryRows)
	return nil
}

// eraseLive resets the subject (counters, deny and shadow records, bans,
// decision state) for every action whose rules count its kind: the
// operator's reset, audited on the decisions topic.
func (c *EraseConfig) eraseLive(ctx context.Context, rep *EraseReport) error {
	if history.IsHashed(c.Subject) {
		rep.NotErased = append(rep.NotErased, "live state: the subject was given as its hash, and live state keys subjects by value")
		return nil
	}
	var actions []string
	for _, r := range c.Rules.Rules() {
		if (c.Action == "" || r.Action == c.Action) && slices.Contains(r.Kinds, c.Kind) && !slices.Contains(actions, r.Action) {
			actions = append(actions, r.Action)
		}
	}
	slices.Sort(actions)
	if len(actions) == 0 {
		return nil // no rule counts the kind: no live state
	}
	store, done, err := c.OpenLive(ctx)
	if err != nil {
		return err
	}
	defer done()
	writer, err := NewWriter(store)
	if err != nil {
		return err
	}
	// The reset's log line names the subject as history stores it hashed
	// when the key is given (nobody can test a guess against it), else by
	// its digest: never as given, which the erasure is about.
	var pseudonym func(string) string
	if c.Hasher != nil {
		pseudonym = c.Hasher.Subject
	}
	set := c.Rules
	op, err := New(Config{Store: store, Writer: writer, Rules: func() *rules.Set { return set }, Group: c.Group, Topic: c.Topic,
		Pseudonym: pseudonym, Logger: c.Logger})
	if err != nil {
		return err
	}
	for _, a := range actions {
		res, err := op.Reset(ctx, Request{Action: a, Operator: c.Operator, Subjects: []limitapi.Subject{{Kind: c.Kind, Subject: c.Subject}}})
		if err != nil {
			return err
		}
		for _, s := range res.Subjects {
			cleared := s.Cleared
			if cleared == nil {
				cleared = []string{}
			}
			rep.Live = append(rep.Live, LiveErased{Action: a, Partition: s.Partition, DeletedKeys: s.DeletedKeys, Cleared: cleared, Entry: s.Entry})
			rep.LiveKeys += s.DeletedKeys + int64(len(s.Cleared))
		}
	}
	return nil
}

// WriteText prints the report for a person.
func (rep *EraseReport) WriteText(w io.Writer) error {
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
