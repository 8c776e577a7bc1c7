package dashboard

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/rules"
)

// Query is what a page, the JSON endpoint or `floodgate query summary`
// shows: an action, optionally narrowed to one kind, how many top subjects
// and which curves.
type Query struct {
	Action string // empty: the action with the most events
	Kind   string // empty: every kind
	Top    int
	Spans  []Span // nil: Spans, the page's
}

// BadRequestError is a parameter the dashboard cannot answer (HTTP 400).
type BadRequestError struct{ Msg string }

func (e *BadRequestError) Error() string { return e.Msg }

func badf(format string, args ...any) error {
	return &BadRequestError{Msg: fmt.Sprintf(format, args...)}
}

// parseQuery reads action, kind and top from v, with defaults; names must
// follow the event contract (docs/events.md).
func parseQuery(v url.Values, def Query) (Query, error) {
	q := def
	for name := range v {
		if name != "action" && name != "kind" && name != "top" {
			return q, badf("unknown parameter %q: want action, kind, top", name)
		}
	}
	if v.Has("action") {
		q.Action = v.Get("action")
		q.Kind = "" // another action's kinds are not the default's
	}
	if v.Has("kind") {
		q.Kind = v.Get("kind")
	}
	// The event contract is the one rule for names: check through it.
	e := event.Event{ID: "x", Action: q.Action, Kind: "k", Subject: "s", TS: time.Unix(1_800_000_000, 0)}
	if q.Kind != "" {
		e.Kind = q.Kind
	}
	if err := e.Validate(); err != nil {
		return q, badf("%v", err)
	}
	if v.Has("top") {
		n, err := strconv.Atoi(v.Get("top"))
		if err != nil || n < 1 || n > 100 {
			return q, badf("top %q: want a number in 1..100", v.Get("top"))
		}
		q.Top = n
	}
	return q, nil
}

// Span is one curve of the page: the last Span of time, per Step.
type Span struct {
	Name string
	Span time.Duration
	Step time.Duration // 0: the data's resolution (CurveStep)
}

// Spans are the design notes' curves: the last hour, day, month and year.
var Spans = []Span{{Name: "hour", Span: time.Hour}, {Name: "day", Span: 24 * time.Hour}, {Name: "month", Span: 30 * 24 * time.Hour}, {Name: "year", Span: 365 * 24 * time.Hour}}

// maxPoints bounds a curve's points: the step grows along the ladder's
// steps until the span fits.
const maxPoints = 800

// ladderSteps are the steps history knows, finest first.
var ladderSteps = []time.Duration{time.Minute, 5 * time.Minute, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}

// Curve is one chart.
type Curve struct {
	Name   string          `json:"name"`
	From   time.Time       `json:"from"`
	To     time.Time       `json:"to"`
	Step   string          `json:"step"`
	Total  int64           `json:"total"`
	Peak   int64           `json:"peak"`
	Points []history.Point `json:"-"`
	Values []int64         `json:"values"`
	// Visitors are the distinct visitors of each step (each step counts its
	// own: they do not add up), when the page shows visitors.
	Visitors     []int64 `json:"visitors,omitempty"`
	PeakVisitors int64   `json:"peak_visitors,omitempty"`
	step         time.Duration
}

// Summary is everything the page shows.
type Summary struct {
	Now    time.Time     `json:"now"`
	Action string        `json:"action"`
	Kind   string        `json:"kind,omitempty"`
	Totals []ActionTotal `json:"actions"`
	Total  int64         `json:"total"`
	// Late counts the action's events in its total only: older than every
	// horizon of the ladder when they came (docs/history.md).
	Late     int64    `json:"late"`
	LastHour int64    `json:"last_hour"`
	LastDay  int64    `json:"last_day"`
	TopDay   []Ranked `json:"top_day"`
	TopEver  []Ranked `json:"top_ever"`
	Curves   []Curve  `json:"curves"`
	// Visitors is the unique visitors beside the events, for an action
	// history counts visitors of (floodgate aggregator --visitors); nil for
	// the others.
	Visitors  *Visitors  `json:"visitors,omitempty"`
	Decisions []Decision `json:"decisions"`
	// DecisionsRead counts decisions read since the dashboard started;
	// DecisionsError says why none can be read now.
	DecisionsRead  int64  `json:"decisions_read"`
	DecisionsError string `json:"decisions_error,omitempty"`
}

// Visitors is the distinct visitors of the page's action and kind: exact up
// to 256, a HyperLogLog estimate above (docs/dashboards.md).
type Visitors struct {
	Total    int64            `json:"total"` // ever
	LastHour int64            `json:"last_hour"`
	LastDay  int64            `json:"last_day"`
	TopDay   []RankedVisitors `json:"top_day"` // subjects by visitors, last 24 hours
}

// RankedVisitors is one top subject by unique visitors.
type RankedVisitors struct {
	Kind     string `json:"kind"`
	Subject  string `json:"subject"`
	Visitors int64  `json:"visitors"`
	Events   int64  `json:"events"`
}

// ActionTotal is one action's total over every kind.
type ActionTotal struct {
	Action string `json:"action"`
	Total  int64  `json:"total"`
}

// Ranked is one top subject.
type Ranked struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Value   int64  `json:"value"`
}

// Decision is a deny decision as shown.
type Decision struct {
	TS      time.Time `json:"ts"`
	Action  string    `json:"action"`
	Kind    string    `json:"kind"`
	Subject string    `json:"subject"`
	Rule    string    `json:"rule"`
	Limit   string    `json:"limit"`
	Count   int64     `json:"count"`
	Until   time.Time `json:"until"`
	Shadow  bool      `json:"shadow"`
	Message string    `json:"message,omitempty"`
}

// Load reads a Summary from history and the recent decisions (nil: none):
// the one loader of the web page, its JSON and `floodgate query summary`,
// which renders it with WriteText.
func Load(ctx context.Context, hq *history.Querier, recent *Recent, q Query, now time.Time) (*Summary, error) {
	s := &Summary{Now: now.UTC(), Action: q.Action, Kind: q.Kind}
	actions, err := hq.Actions(ctx)
	if err != nil {
		return nil, err
	}
	var most int64
	for _, a := range actions {
		s.Totals = append(s.Totals, ActionTotal{Action: a.Subject, Total: a.Value})
		if q.Action == "" && (s.Action == "" || a.Value > most) {
			s.Action, most = a.Subject, a.Value
		}
	}
	if s.Action == "" {
		return s, nil // nothing recorded yet
	}
	q.Action = s.Action
	k := history.Key{Action: q.Action, Kind: q.Kind}
	if s.Total, err = hq.Total(ctx, k); err != nil {
		return nil, err
	}
	if s.Late, err = hq.Late(ctx, q.Action); err != nil {
		return nil, err
	}
	// Counts and tops end at the end of the current minute, so that this
	// minute's events count.
	end := history.Bin(now, time.Minute).Add(time.Minute)
	if s.LastHour, err = hq.Count(ctx, k, end.Add(-time.Hour), end); err != nil {
		return nil, err
	}
	if s.LastDay, err = hq.Count(ctx, k, end.Add(-24*time.Hour), end); err != nil {
		return nil, err
	}
	day, err := hq.Top(ctx, q.Action, q.Kind, end.Add(-24*time.Hour), end, q.Top)
	if err != nil {
		return nil, err
	}
	ever, err := hq.Top(ctx, q.Action, q.Kind, time.Time{}, time.Time{}, q.Top)
	if err != nil {
		return nil, err
	}
	s.TopDay, s.TopEver = ranked(day), ranked(ever)
	if s.Visitors, err = loadVisitors(ctx, hq, k, end, q.Top); err != nil {
		return nil, err
	}
	tiers, err := hq.Tiers(ctx)
	if err != nil {
		return nil, err
	}
	spans := q.Spans
	if spans == nil {
		spans = Spans
	}
	for _, sp := range spans {
		c, err := loadCurve(ctx, hq, k, sp, tiers, now, s.Visitors != nil)
		if err != nil {
			return nil, err
		}
		s.Curves = append(s.Curves, c)
	}
	if recent != nil {
		ds, read, err := recent.List()
		for _, d := range ds {
			s.Decisions = append(s.Decisions, Decision{
				TS: d.TS, Action: d.Action, Kind: d.Kind, Subject: d.Subject, Rule: d.Rule,
				Limit: strconv.FormatInt(d.Limit.Count, 10) + "/" + rules.FormatWindow(d.Limit.Window),
				Count: d.Count, Until: d.Until, Shadow: d.Shadow, Message: d.Message,
			})
		}
		s.DecisionsRead = read
		if err != nil {
			s.DecisionsError = err.Error()
		}
	}
	return s, nil
}

// loadVisitors reads the unique visitors of k, or nil when history holds
// none (an action it counts no visitors of): whether an action counts them
// is the aggregator's setting, which the dashboard reads from the data.
func loadVisitors(ctx context.Context, hq *history.Querier, k history.Key, end time.Time, top int) (*Visitors, error) {
	total, err := hq.TotalVisitors(ctx, k)
	if err != nil || total == 0 {
		return nil, err
	}
	v := &Visitors{Total: total}
	if v.LastHour, err = hq.Visitors(ctx, k, end.Add(-time.Hour), end); err != nil {
		return nil, err
	}
	if v.LastDay, err = hq.Visitors(ctx, k, end.Add(-24*time.Hour), end); err != nil {
		return nil, err
	}
	rs, err := hq.TopVisitors(ctx, k.Action, k.Kind, end.Add(-24*time.Hour), end, top)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		v.TopDay = append(v.TopDay, RankedVisitors{Kind: r.Kind, Subject: r.Subject, Visitors: r.Visitors, Events: r.Events})
	}
	return v, nil
}

func ranked(rs []history.Ranked) []Ranked {
	out := make([]Ranked, len(rs))
	for i, r := range rs {
		out[i] = Ranked{Kind: r.Kind, Subject: r.Subject, Value: r.Value}
	}
	return out
}

// loadCurve reads one chart; with visitors, the events and the visitors of
// each step in one query (visitors_curve).
func loadCurve(ctx context.Context, hq *history.Querier, k history.Key, sp Span, tiers []history.StoredTier, now time.Time, visitors bool) (Curve, error) {
	step := sp.Step
	if step <= 0 {
		step = CurveStep(tiers, now.Add(-sp.Span), sp.Span)
	}
	to := history.Bin(now, step).Add(step)
	from := to.Add(-sp.Span)
	var pts []history.Point
	c := Curve{Name: sp.Name, From: from, To: to, Step: stepName(step), step: step}
	if visitors {
		vps, err := hq.VisitorsCurve(ctx, k, from, to, step)
		if err != nil {
			return Curve{}, err
		}
		for _, p := range vps {
			pts = append(pts, history.Point{Time: p.Time, Value: p.Events})
			c.Visitors = append(c.Visitors, p.Visitors)
			c.PeakVisitors = max(c.PeakVisitors, p.Visitors)
		}
	} else {
		var err error
		if pts, err = hq.Curve(ctx, k, from, to, step); err != nil {
			return Curve{}, err
		}
	}
	c.Points = pts
	for _, p := range pts {
		c.Total += p.Value
		c.Peak = max(c.Peak, p.Value)
		c.Values = append(c.Values, p.Value)
	}
	return c, nil
}

// CurveStep is the step of a curve over span from from: the resolution of
// the data at from — the width of the finest tier whose watermark is at or
// before it, since older data is coarser — grown along the ladder's steps
// until the curve has at most maxPoints points. A step finer than the data
// would draw spikes and zeros; a coarser one is exact (docs/dashboards.md).
func CurveStep(tiers []history.StoredTier, from time.Time, span time.Duration) time.Duration {
	res := time.Minute
	for _, t := range tiers {
		if !t.RolledTo.After(from) {
			res = t.Width
			break
		}
	}
	for _, s := range ladderSteps {
		if s >= res && span/s <= maxPoints {
			return s
		}
	}
	return ladderSteps[len(ladderSteps)-1]
}

func stepName(d time.Duration) string {
	switch {
	case d%(7*24*time.Hour) == 0:
		return strconv.Itoa(int(d/(7*24*time.Hour))) + "w"
	case d%(24*time.Hour) == 0:
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	case d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	default:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	}
}
