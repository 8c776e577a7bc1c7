package history

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Answer is the answer of a history query, printed as text for a person or
// as one JSON document for a script (its shape per query is in
// docs/dashboards.md, "Terminal"). dashboard.Summary is one too.
type Answer interface {
	WriteText(w io.Writer) error
}

// Print writes a as text, or with asJSON as one line of JSON.
func Print(w io.Writer, a Answer, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(a)
	}
	return a.WriteText(w)
}

// keyDoc is the selected key in an answer's JSON document; an empty kind or
// subject means every one.
type keyDoc struct {
	Action  string `json:"action"`
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
}

func docOf(k Key) keyDoc { return keyDoc{Action: k.Action, Kind: k.Kind, Subject: k.Subject} }

func (d keyDoc) key() Key { return Key{Action: d.Action, Kind: d.Kind, Subject: d.Subject} }

// rangeText is a range as the text answers print it.
func rangeText(from, to time.Time) string {
	return "[" + from.Format(time.RFC3339) + ", " + to.Format(time.RFC3339) + ")"
}

// CountAnswer is the events of a key in [From, To).
type CountAnswer struct {
	keyDoc
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
	Count int64     `json:"count"`
}

// CountAnswer counts the events of k in [from, to).
func (q *Querier) CountAnswer(ctx context.Context, k Key, from, to time.Time) (*CountAnswer, error) {
	n, err := q.Count(ctx, k, from, to)
	if err != nil {
		return nil, err
	}
	return &CountAnswer{keyDoc: docOf(k), From: from, To: to, Count: n}, nil
}

// WriteText prints the count, the key and the range on one line.
func (a *CountAnswer) WriteText(w io.Writer) error {
	_, err := fmt.Fprintf(w, "%d\t%s %s\n", a.Count, a.key(), rangeText(a.From, a.To))
	return err
}

// TotalAnswer is the events of a key ever.
type TotalAnswer struct {
	keyDoc
	Total int64 `json:"total"`
}

// TotalAnswer counts the events of k ever.
func (q *Querier) TotalAnswer(ctx context.Context, k Key) (*TotalAnswer, error) {
	n, err := q.Total(ctx, k)
	if err != nil {
		return nil, err
	}
	return &TotalAnswer{keyDoc: docOf(k), Total: n}, nil
}

// WriteText prints the total and the key on one line.
func (a *TotalAnswer) WriteText(w io.Writer) error {
	_, err := fmt.Fprintf(w, "%d\t%s, all time\n", a.Total, a.key())
	return err
}

// CurveAnswer is the events of a key per step of [From, To).
type CurveAnswer struct {
	keyDoc
	From        time.Time    `json:"from"`
	To          time.Time    `json:"to"`
	StepSeconds int64        `json:"step_seconds"`
	Points      []curvePoint `json:"points"`
	points      []Point
	step        time.Duration
}

type curvePoint struct {
	Time  time.Time `json:"time"`
	Value int64     `json:"value"`
}

// CurveAnswer returns the events of k per step of [from, to).
func (q *Querier) CurveAnswer(ctx context.Context, k Key, from, to time.Time, step time.Duration) (*CurveAnswer, error) {
	points, err := q.Curve(ctx, k, from, to, step)
	if err != nil {
		return nil, err
	}
	a := &CurveAnswer{keyDoc: docOf(k), From: from, To: to, StepSeconds: int64(step / time.Second),
		Points: make([]curvePoint, 0, len(points)), points: points, step: step}
	for _, p := range points {
		a.Points = append(a.Points, curvePoint{p.Time.UTC(), p.Value})
	}
	return a, nil
}

// WriteText prints the key and range, then the curve (WriteCurve).
func (a *CurveAnswer) WriteText(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "%s %s\n", a.key(), rangeText(a.From, a.To)); err != nil {
		return err
	}
	return WriteCurve(w, a.points, a.step)
}

// VisitorsAnswer is the events and unique visitors of a key per step of
// [From, To), then in the whole range and ever (a visitor of several steps
// counts once there).
type VisitorsAnswer struct {
	keyDoc
	From            time.Time       `json:"from"`
	To              time.Time       `json:"to"`
	StepSeconds     int64           `json:"step_seconds"`
	Points          []visitorsPoint `json:"points"`
	VisitorsInRange int64           `json:"visitors_in_range"`
	VisitorsEver    int64           `json:"visitors_ever"`
	points          []VisitorPoint
	step            time.Duration
}

type visitorsPoint struct {
	Time     time.Time `json:"time"`
	Events   int64     `json:"events"`
	Visitors int64     `json:"visitors"`
}

// VisitorsAnswer returns the events and unique visitors of k per step of
// [from, to), in the range and ever.
func (q *Querier) VisitorsAnswer(ctx context.Context, k Key, from, to time.Time, step time.Duration) (*VisitorsAnswer, error) {
	points, err := q.VisitorsCurve(ctx, k, from, to, step)
	if err != nil {
		return nil, err
	}
	a := &VisitorsAnswer{keyDoc: docOf(k), From: from, To: to, StepSeconds: int64(step / time.Second),
		Points: make([]visitorsPoint, 0, len(points)), points: points, step: step}
	for _, p := range points {
		a.Points = append(a.Points, visitorsPoint{p.Time.UTC(), p.Events, p.Visitors})
	}
	if a.VisitorsInRange, err = q.Visitors(ctx, k, from, to); err != nil {
		return nil, err
	}
	if a.VisitorsEver, err = q.TotalVisitors(ctx, k); err != nil {
		return nil, err
	}
	return a, nil
}

// WriteText prints the key and range, the curve (WriteVisitorsCurve), then
// the range's and all-time unique visitors.
func (a *VisitorsAnswer) WriteText(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "%s %s\n", a.key(), rangeText(a.From, a.To)); err != nil {
		return err
	}
	if err := WriteVisitorsCurve(w, a.points, a.step); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d\tunique visitors in range\n%d\tunique visitors ever\n", a.VisitorsInRange, a.VisitorsEver)
	return err
}

// TopQuery asks for the N subjects of Action (of Kind, or every kind) with
// the most events, or with Visitors the most unique visitors, in [From,
// To); zero From and To rank by all-time totals.
type TopQuery struct {
	Action, Kind string
	From, To     time.Time
	N            int
	Visitors     bool
}

// TopAnswer is a ranking; From and To are null in JSON when it is of all
// time, and visitors is in each subject only when it ranks by them.
type TopAnswer struct {
	Action   string      `json:"action"`
	Kind     string      `json:"kind"`
	From     *time.Time  `json:"from"`
	To       *time.Time  `json:"to"`
	By       string      `json:"by"` // events or visitors
	Subjects []rankedDoc `json:"subjects"`
	n        int
	events   []Ranked
	visitors []RankedVisitors
}

type rankedDoc struct {
	Kind     string `json:"kind"`
	Subject  string `json:"subject"`
	Events   int64  `json:"events"`
	Visitors *int64 `json:"visitors,omitempty"`
}

// TopAnswer ranks the subjects tq asks for.
func (q *Querier) TopAnswer(ctx context.Context, tq TopQuery) (*TopAnswer, error) {
	a := &TopAnswer{Action: tq.Action, Kind: tq.Kind, By: "events", Subjects: []rankedDoc{}, n: tq.N}
	if !tq.From.IsZero() || !tq.To.IsZero() {
		a.From, a.To = &tq.From, &tq.To
	}
	var err error
	if tq.Visitors {
		a.By = "visitors"
		if a.visitors, err = q.TopVisitors(ctx, tq.Action, tq.Kind, tq.From, tq.To, tq.N); err != nil {
			return nil, err
		}
		for _, r := range a.visitors {
			a.Subjects = append(a.Subjects, rankedDoc{Kind: r.Kind, Subject: r.Subject, Events: r.Events, Visitors: &r.Visitors})
		}
		return a, nil
	}
	if a.events, err = q.Top(ctx, tq.Action, tq.Kind, tq.From, tq.To, tq.N); err != nil {
		return nil, err
	}
	for _, r := range a.events {
		a.Subjects = append(a.Subjects, rankedDoc{Kind: r.Kind, Subject: r.Subject, Events: r.Value})
	}
	return a, nil
}

// WriteText prints what is ranked over which range, then the table
// (WriteTop or WriteTopVisitors).
func (a *TopAnswer) WriteText(w io.Writer) error {
	what := a.Action
	if a.By == "visitors" {
		what += " by unique visitors"
	}
	var err error
	if a.From == nil {
		_, err = fmt.Fprintf(w, "top %d %s, all time\n", a.n, what)
	} else {
		_, err = fmt.Fprintf(w, "top %d %s %s\n", a.n, what, rangeText(*a.From, *a.To))
	}
	if err != nil {
		return err
	}
	if a.By == "visitors" {
		return WriteTopVisitors(w, a.visitors)
	}
	return WriteTop(w, a.events)
}
