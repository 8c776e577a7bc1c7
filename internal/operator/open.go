package operator

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// NewLocal is the Operator of a process that reaches the live store itself
// (floodgate inspect, ban, unban, reset without --admin-url): the rules
// set, checks answered from the partitions' snapshots (SnapshotChecker).
// A non-empty group, for writes, makes a reset record that consumer
// group's offset on topic as its boundary.
func NewLocal(store *window.Store, set *rules.Set, group, topic string, logger *slog.Logger) (*Operator, error) {
	writer, err := NewWriter(store)
	if err != nil {
		return nil, err
	}
	rulesFn := func() *rules.Set { return set }
	cfg := Config{Store: store, Writer: writer, Rules: rulesFn, Checker: NewSnapshotChecker(store, rulesFn, 0), Logger: logger}
	if group != "" {
		cfg.Group, cfg.Topic = group, topic
	}
	return New(cfg)
}

// ParseSubjects reads subjects given as kind=value (a value may hold '=').
func ParseSubjects(args []string) ([]limitapi.Subject, error) {
	var out []limitapi.Subject
	for _, s := range args {
		kind, value, ok := strings.Cut(s, "=")
		if !ok {
			return out, fmt.Errorf("subject %q: want kind=value, e.g. ip=203.0.113.7", s)
		}
		out = append(out, limitapi.Subject{Kind: kind, Subject: value})
	}
	return out, nil
}
