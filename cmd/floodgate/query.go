package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-dev/floodgate/internal/dashboard"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/timespan"
)

// QueryCmd prints the answers of the dashboard SQL functions.
type QueryCmd struct {
	Count    QueryCountCmd    `cmd:"" help:"Events of an action (and subject) in a time range."`
	Curve    QueryCurveCmd    `cmd:"" help:"Events per step over a time range, with a chart."`
	Top      QueryTopCmd      `cmd:"" help:"Subjects with the most events of an action."`
	Total    QueryTotalCmd    `cmd:"" help:"Events of an action (and subject) ever."`
	Visitors QueryVisitorsCmd `cmd:"" help:"Unique visitors of an action (and subject): per step, in a time range and ever."`
	Summary  QuerySummaryCmd  `cmd:"" help:"The web dashboard's page in the terminal: totals, top subjects, unique visitors and curves."`
	// DashboardAlias is the summary's old name, beside the web dashboard
	// command; hidden, kept for the scripts that call it.
	DashboardAlias QuerySummaryCmd `cmd:"" name:"dashboard" hidden:"" help:"Old name of query summary."`
}

// queryFlags are shared by the query subcommands.
type queryFlags struct {
	PostgresFlags
	HistoryKeyFlags
	Rules string `name:"rules" env:"FLOODGATE_RULES" default:"examples/rules.yaml" help:"Rules file (YAML), as the aggregator's: its kinds: block says how a subject of each kind is normalized (--subject with --kind is looked up as given and normalized). The default file missing: the built-in normalization (email trimmed and lowercased, ip in canonical form)."`
}

func (f *queryFlags) querier(ctx context.Context) (*history.Querier, func(), error) {
	h, err := f.Hasher()
	if err != nil {
		return nil, nil, err
	}
	var set *rules.Set // nil: the built-in kind defaults
	if rules.Found(f.Rules) == nil {
		// A query only reads: outside the repository the default file's
		// absence is no error, a file named explicitly must load.
		if set, err = rules.Load(f.Rules); err != nil {
			return nil, nil, err
		}
	}
	pool, err := f.PostgresFlags.Pool(ctx, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, nil, err
	}
	return history.NewQuerier(pool).WithHasher(h).WithNormalizer(set), pool.Close, nil
}

// print asks the database through ask and prints its answer as text or
// JSON.
func (f *queryFlags) print(ctx context.Context, std stdio, j jsonFlag, ask func(*history.Querier) (history.Answer, error)) error {
	q, done, err := f.querier(ctx)
	if err != nil {
		return err
	}
	defer done()
	a, err := ask(q)
	if err != nil {
		return err
	}
	return history.Print(std.out, a, j.JSON)
}

// jsonFlag makes a query print one JSON document instead of text; its
// shape per command is in docs/dashboards.md, "Terminal".
type jsonFlag struct {
	JSON bool `name:"json" env:"FLOODGATE_QUERY_JSON" help:"Print one JSON document instead of text."`
}

// keyFlags select events.
type keyFlags struct {
	Action  string `name:"action" short:"a" env:"FLOODGATE_QUERY_ACTION" required:"" help:"Action, e.g. visit."`
	Subject string `name:"subject" short:"s" env:"FLOODGATE_QUERY_SUBJECT" help:"Subject; empty: every subject of the action."`
	Kind    string `name:"kind" short:"k" env:"FLOODGATE_QUERY_KIND" help:"Kind of the subject (ip, email, ...); empty: every kind."`
}

func (k keyFlags) key() history.Key {
	return history.Key{Action: k.Action, Kind: k.Kind, Subject: k.Subject}
}

// rangeFlags select a time range: --last, or --from/--to.
type rangeFlags struct {
	Last string `name:"last" env:"FLOODGATE_QUERY_LAST" default:"24h" help:"Range ending now: 90m, 24h, 7d, 52w. Ignored with --from."`
	From string `name:"from" env:"FLOODGATE_QUERY_FROM" help:"Range start (RFC 3339, 2006-01-02 15:04 or a date, UTC)."`
	To   string `name:"to" env:"FLOODGATE_QUERY_TO" help:"Range end, exclusive. Default: now."`
	Now  string `name:"now" hidden:"" help:"Pretend the time is this (tests, demos)."`
}

func (r rangeFlags) now() (time.Time, error) {
	if r.Now == "" {
		return time.Now().UTC(), nil
	}
	t, err := timespan.ParseTime(r.Now, time.Now())
	if err != nil {
		return time.Time{}, fmt.Errorf("--now: %w", err)
	}
	return t, nil
}

// Validate refuses a range that does not parse at parse time, so a bad
// value is a usage error (exit 2) as kong's own are; Run parses it again.
func (r rangeFlags) Validate() error {
	_, _, err := r.bounds()
	return err
}

func (r rangeFlags) bounds() (from, to time.Time, err error) {
	now, err := r.now()
	if err != nil {
		return from, to, err
	}
	to = now
	if r.To != "" {
		if to, err = timespan.ParseTime(r.To, now); err != nil {
			return from, to, fmt.Errorf("--to: %w", err)
		}
	}
	if r.From != "" {
		if from, err = timespan.ParseTime(r.From, now); err != nil {
			return from, to, fmt.Errorf("--from: %w", err)
		}
	} else {
		d, err := historySpan(r.Last)
		if err != nil {
			return from, to, fmt.Errorf("--last: %w", err)
		}
		from = to.Add(-d)
	}
	if !from.Before(to) {
		return from, to, fmt.Errorf("empty range [%s, %s)", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	return from, to, nil
}

// QueryCountCmd is `floodgate query count`.
type QueryCountCmd struct {
	queryFlags
	keyFlags
	rangeFlags
	jsonFlag
}

// Run prints the count.
func (c *QueryCountCmd) Run(ctx context.Context, std stdio) error {
	from, to, err := c.bounds()
	if err != nil {
		return err
	}
	return c.print(ctx, std, c.jsonFlag, func(q *history.Querier) (history.Answer, error) {
		return q.CountAnswer(ctx, c.key(), from, to)
	})
}

// stepFlag is the step of a curve.
type stepFlag struct {
	Step string `name:"step" env:"FLOODGATE_QUERY_STEP" help:"Step: 1m, 5m, 1h, 1d... Default: about 48 points."`
}

// step is --step, or about 48 points over [from, to).
func (s stepFlag) step(from, to time.Time) (time.Duration, error) {
	if s.Step == "" {
		return history.AutoStep(to.Sub(from), 48), nil
	}
	step, err := historySpan(s.Step)
	if err != nil {
		return 0, fmt.Errorf("--step: %w", err)
	}
	return step, nil
}

// QueryCurveCmd is `floodgate query curve`.
type QueryCurveCmd struct {
	queryFlags
	keyFlags
	rangeFlags
	jsonFlag
	stepFlag
}

// Run prints the curve as a sparkline and one bar per step.
func (c *QueryCurveCmd) Run(ctx context.Context, std stdio) error {
	from, to, err := c.bounds()
	if err != nil {
		return err
	}
	step, err := c.step(from, to)
	if err != nil {
		return err
	}
	return c.print(ctx, std, c.jsonFlag, func(q *history.Querier) (history.Answer, error) {
		return q.CurveAnswer(ctx, c.key(), from, to, step)
	})
}

// QueryTopCmd is `floodgate query top`.
type QueryTopCmd struct {
	queryFlags
	rangeFlags
	Action   string `name:"action" short:"a" env:"FLOODGATE_QUERY_ACTION" required:"" help:"Action, e.g. visit."`
	Kind     string `name:"kind" short:"k" env:"FLOODGATE_QUERY_KIND" help:"Only subjects of this kind."`
	Top      int    `name:"top" short:"n" env:"FLOODGATE_QUERY_TOP" default:"10" help:"How many subjects."`
	Ever     bool   `name:"ever" env:"FLOODGATE_QUERY_EVER" help:"Rank by all-time totals instead of a range."`
	Visitors bool   `name:"visitors" env:"FLOODGATE_QUERY_VISITORS" help:"Rank by unique visitors instead of events."`
	jsonFlag
}

// Run prints the ranking.
func (c *QueryTopCmd) Run(ctx context.Context, std stdio) error {
	tq := history.TopQuery{Action: c.Action, Kind: c.Kind, N: c.Top, Visitors: c.Visitors}
	if !c.Ever {
		var err error
		if tq.From, tq.To, err = c.bounds(); err != nil {
			return err
		}
	}
	return c.print(ctx, std, c.jsonFlag, func(q *history.Querier) (history.Answer, error) {
		return q.TopAnswer(ctx, tq)
	})
}

// QueryTotalCmd is `floodgate query total`.
type QueryTotalCmd struct {
	queryFlags
	keyFlags
	jsonFlag
}

// Run prints the total.
func (c *QueryTotalCmd) Run(ctx context.Context, std stdio) error {
	return c.print(ctx, std, c.jsonFlag, func(q *history.Querier) (history.Answer, error) {
		return q.TotalAnswer(ctx, c.key())
	})
}

// QueryVisitorsCmd is `floodgate query visitors`.
type QueryVisitorsCmd struct {
	queryFlags
	keyFlags
	rangeFlags
	jsonFlag
	stepFlag
}

// Run prints events and unique visitors per step, then the range's and
// all-time unique visitors (a visitor of several steps counts once there).
func (c *QueryVisitorsCmd) Run(ctx context.Context, std stdio) error {
	from, to, err := c.bounds()
	if err != nil {
		return err
	}
	step, err := c.step(from, to)
	if err != nil {
		return err
	}
	return c.print(ctx, std, c.jsonFlag, func(q *history.Querier) (history.Answer, error) {
		return q.VisitorsAnswer(ctx, c.key(), from, to, step)
	})
}

// QuerySummaryCmd is `floodgate query summary` (formerly query dashboard):
// the web dashboard's page, loaded by the same code, in the terminal.
type QuerySummaryCmd struct {
	queryFlags
	Action string `name:"action" short:"a" env:"FLOODGATE_QUERY_ACTION" help:"Action to detail; default: the one with the most events."`
	Kind   string `name:"kind" short:"k" env:"FLOODGATE_QUERY_KIND" help:"Only subjects of this kind; empty: every kind."`
	Top    int    `name:"top" short:"n" env:"FLOODGATE_QUERY_TOP" default:"10" help:"Subjects in the top lists."`
	Now    string `name:"now" hidden:"" help:"Pretend the time is this (tests, demos)."`
	jsonFlag
}

// Run prints the summary.
func (c *QuerySummaryCmd) Run(ctx context.Context, std stdio) error {
	now := time.Now().UTC()
	if c.Now != "" {
		t, err := timespan.ParseTime(c.Now, now)
		if err != nil {
			return fmt.Errorf("--now: %w", err)
		}
		now = t
	}
	spans := dashboard.TerminalSpans
	if c.JSON {
		spans = nil // the web page's, as /api/summary answers
	}
	return c.print(ctx, std, c.jsonFlag, func(q *history.Querier) (history.Answer, error) {
		return dashboard.Load(ctx, q, nil, dashboard.Query{Action: c.Action, Kind: c.Kind, Top: c.Top, Spans: spans}, now)
	})
}
