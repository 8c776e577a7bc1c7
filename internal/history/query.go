package history

import (
	"context"
	"fmt"
	"time"
)

// Querier answers dashboard questions through the SQL functions of
// migration 00003, so the terminal and Grafana agree.
type Querier struct {
	db     DB
	hasher *Hasher
	norm   Normalizer
}

// NewQuerier returns a Querier over the history in db.
func NewQuerier(db DB) *Querier {
	return &Querier{db: db}
}

// WithHasher returns a Querier that looks a subject up under both the forms
// it may be stored in: as given and hashed with h (a kind stored hashed,
// or whose policy changed). Counts and curves add the two up; visitors
// too, so a visitor seen both before and after a kind's policy changed
// counts twice.
func (q *Querier) WithHasher(h *Hasher) *Querier {
	return &Querier{db: q.db, hasher: h, norm: q.norm}
}

// WithNormalizer returns a Querier that looks a subject of a given kind up
// as given and normalized by n (the rules file's normalization, which the
// sink stores), adding the two up: "Victim@x.example" finds the rows of
// victim@x.example, and those an older version wrote under the spelling
// given. Without a kind, a subject is looked up as given.
func (q *Querier) WithNormalizer(n Normalizer) *Querier {
	return &Querier{db: q.db, hasher: q.hasher, norm: n}
}

// forms returns k under each form its subject may be stored in.
func (q *Querier) forms(k Key) []Key {
	if k.Subject == "" {
		return []Key{k}
	}
	subs := storedForms(q.hasher, q.norm, k.Kind, k.Subject)
	out := make([]Key, len(subs))
	for i, s := range subs {
		out[i] = k
		out[i].Subject = s
	}
	return out
}

// sumForms adds f over the forms of k.
func sumForms(q *Querier, k Key, f func(Key) (int64, error)) (int64, error) {
	var total int64
	for _, fk := range q.forms(k) {
		n, err := f(fk)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// Key selects events: Action is required; an empty Subject means every
// subject of the action, an empty Kind every kind.
type Key struct {
	Action, Kind, Subject string
}

func (k Key) String() string {
	s := k.Action
	if k.Subject != "" {
		if k.Kind != "" {
			return s + " " + k.Kind + ":" + k.Subject
		}
		return s + " " + k.Subject
	}
	if k.Kind != "" {
		s += " kind " + k.Kind
	}
	return s
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Count returns the events of k whose bucket starts in [from, to).
func (q *Querier) Count(ctx context.Context, k Key, from, to time.Time) (int64, error) {
	return sumForms(q, k, func(k Key) (int64, error) { return q.count(ctx, k, from, to) })
}

func (q *Querier) count(ctx context.Context, k Key, from, to time.Time) (int64, error) {
	var n int64
	err := q.db.QueryRow(ctx, `SELECT `+qualify("count")+`($1, $2, $3, $4, $5)`,
		k.Action, nullable(k.Subject), from, to, nullable(k.Kind)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count %s [%s, %s): %w", k, from.Format(time.RFC3339), to.Format(time.RFC3339), err)
	}
	return n, nil
}

// Point is one step of a curve.
type Point struct {
	Time  time.Time
	Value int64
}

// Curve returns one point per step over [from, to), zeros included.
func (q *Querier) Curve(ctx context.Context, k Key, from, to time.Time, step time.Duration) ([]Point, error) {
	return sumCurves(q, k, func(fk Key) ([]Point, error) { return q.curve(ctx, fk, from, to, step) },
		func(p *Point, o Point) { p.Value += o.Value })
}

// sumCurves adds the curves of the forms of k point by point (they share
// from, to and step, so their points line up).
func sumCurves[P any](q *Querier, k Key, curve func(Key) ([]P, error), add func(*P, P)) ([]P, error) {
	var out []P
	for i, fk := range q.forms(k) {
		ps, err := curve(fk)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			out = ps
			continue
		}
		for j := range min(len(out), len(ps)) {
			add(&out[j], ps[j])
		}
	}
	return out, nil
}

func (q *Querier) curve(ctx context.Context, k Key, from, to time.Time, step time.Duration) ([]Point, error) {
	rows, err := q.db.Query(ctx, `SELECT "time", value FROM `+qualify("curve")+`($1, $2, $3, $4, $5, $6)`,
		k.Action, nullable(k.Subject), from, to, step, nullable(k.Kind))
	if err != nil {
		return nil, fmt.Errorf("curve %s: %w", k, err)
	}
	defer rows.Close()
	var out []Point
	for rows.Next() {
		var p Point
		if err := rows.Scan(&p.Time, &p.Value); err != nil {
			return nil, fmt.Errorf("curve %s: %w", k, err)
		}
		p.Time = p.Time.UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("curve %s: %w", k, err)
	}
	return out, nil
}

// Ranked is one row of a top-N answer.
type Ranked struct {
	Kind, Subject string
	Value         int64
}

// Top returns the n subjects with the most events of the action in [from,
// to); zero from and to rank by all-time totals.
func (q *Querier) Top(ctx context.Context, action, kind string, from, to time.Time, n int) ([]Ranked, error) {
	var f, t any
	if !from.IsZero() || !to.IsZero() {
		f, t = from, to
		if to.IsZero() {
			t = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
		}
	}
	rows, err := q.db.Query(ctx, `SELECT kind, subject, value FROM `+qualify("top")+`($1, $2, $3, $4, $5)`,
		action, f, t, n, nullable(kind))
	if err != nil {
		return nil, fmt.Errorf("top %s: %w", action, err)
	}
	defer rows.Close()
	var out []Ranked
	for rows.Next() {
		var r Ranked
		if err := rows.Scan(&r.Kind, &r.Subject, &r.Value); err != nil {
			return nil, fmt.Errorf("top %s: %w", action, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("top %s: %w", action, err)
	}
	return out, nil
}

// Total returns every event of k ever counted (late ones included).
func (q *Querier) Total(ctx context.Context, k Key) (int64, error) {
	return sumForms(q, k, func(k Key) (int64, error) { return q.total(ctx, k) })
}

func (q *Querier) total(ctx context.Context, k Key) (int64, error) {
	var n int64
	err := q.db.QueryRow(ctx, `SELECT `+qualify("total")+`($1, $2, $3)`,
		k.Action, nullable(k.Subject), nullable(k.Kind)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("total %s: %w", k, err)
	}
	return n, nil
}

// Late returns the events that arrived after every tier covering their time
// had expired (counted in totals, in no bucket).
func (q *Querier) Late(ctx context.Context, action string) (int64, error) {
	var n int64
	err := q.db.QueryRow(ctx, `SELECT coalesce(sum(n), 0)::bigint FROM `+qualify("history_late")+
		` WHERE $1 = '' OR action = $1`, action).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("late events %s: %w", action, err)
	}
	return n, nil
}

// Actions returns every action with its total.
func (q *Querier) Actions(ctx context.Context) ([]Ranked, error) {
	rows, err := q.db.Query(ctx, `SELECT action, value FROM `+qualify("actions")+`()`)
	if err != nil {
		return nil, fmt.Errorf("actions: %w", err)
	}
	defer rows.Close()
	var out []Ranked
	for rows.Next() {
		var r Ranked
		if err := rows.Scan(&r.Subject, &r.Value); err != nil {
			return nil, fmt.Errorf("actions: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// StoredTier is one tier of the ladder as stored, with its watermark:
// nothing older than RolledTo lives in the tier (zero: no limit).
type StoredTier struct {
	Step     string
	Width    time.Duration
	RolledTo time.Time
}

// Tiers returns the stored ladder, finest first; empty before a sink or the
// roller stored one. Dashboards read it to know the resolution of the data
// at a given age: the finest tier whose watermark is at or before it.
func (q *Querier) Tiers(ctx context.Context) ([]StoredTier, error) {
	rows, err := q.db.Query(ctx, `SELECT step, extract(epoch FROM width)::float8,
		CASE WHEN rolled_to = '-infinity' THEN NULL ELSE rolled_to END FROM `+qualify("history_tiers")+` ORDER BY position`)
	if err != nil {
		return nil, fmt.Errorf("tiers: %w", err)
	}
	defer rows.Close()
	var out []StoredTier
	for rows.Next() {
		var t StoredTier
		var secs float64
		var rolled *time.Time
		if err := rows.Scan(&t.Step, &secs, &rolled); err != nil {
			return nil, fmt.Errorf("tiers: %w", err)
		}
		t.Width = time.Duration(secs * float64(time.Second))
		if rolled != nil {
			t.RolledTo = rolled.UTC()
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tiers: %w", err)
	}
	return out, nil
}

// Visitors returns the distinct visitors (values of the attr counted for the
// action, SinkConfig.Visitors) of the events of k whose bucket starts in
// [from, to): exact up to 256, a HyperLogLog estimate beyond (0.81% standard
// error).
func (q *Querier) Visitors(ctx context.Context, k Key, from, to time.Time) (int64, error) {
	return sumForms(q, k, func(k Key) (int64, error) { return q.visitors(ctx, k, from, to) })
}

func (q *Querier) visitors(ctx context.Context, k Key, from, to time.Time) (int64, error) {
	var n int64
	err := q.db.QueryRow(ctx, `SELECT `+qualify("visitors")+`($1, $2, $3, $4, $5)`,
		k.Action, nullable(k.Subject), from, to, nullable(k.Kind)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("visitors %s [%s, %s): %w", k, from.Format(time.RFC3339), to.Format(time.RFC3339), err)
	}
	return n, nil
}

// TotalVisitors returns the distinct visitors of k ever (late events
// included).
func (q *Querier) TotalVisitors(ctx context.Context, k Key) (int64, error) {
	return sumForms(q, k, func(k Key) (int64, error) { return q.totalVisitors(ctx, k) })
}

func (q *Querier) totalVisitors(ctx context.Context, k Key) (int64, error) {
	var n int64
	err := q.db.QueryRow(ctx, `SELECT `+qualify("total_visitors")+`($1, $2, $3)`,
		k.Action, nullable(k.Subject), nullable(k.Kind)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("total visitors %s: %w", k, err)
	}
	return n, nil
}

// VisitorPoint is one step of a visitors curve: the events and the distinct
// visitors of that step.
type VisitorPoint struct {
	Time     time.Time
	Events   int64
	Visitors int64
}

// VisitorsCurve returns one point per step over [from, to), zeros included.
// Each step counts its own distinct visitors: a visitor of two steps counts
// in both.
func (q *Querier) VisitorsCurve(ctx context.Context, k Key, from, to time.Time, step time.Duration) ([]VisitorPoint, error) {
	return sumCurves(q, k, func(fk Key) ([]VisitorPoint, error) { return q.visitorsCurve(ctx, fk, from, to, step) },
		func(p *VisitorPoint, o VisitorPoint) { p.Events += o.Events; p.Visitors += o.Visitors })
}

func (q *Querier) visitorsCurve(ctx context.Context, k Key, from, to time.Time, step time.Duration) ([]VisitorPoint, error) {
	rows, err := q.db.Query(ctx, `SELECT "time", events, visitors FROM `+qualify("visitors_curve")+`($1, $2, $3, $4, $5, $6)`,
		k.Action, nullable(k.Subject), from, to, step, nullable(k.Kind))
	if err != nil {
		return nil, fmt.Errorf("visitors curve %s: %w", k, err)
	}
	defer rows.Close()
	var out []VisitorPoint
	for rows.Next() {
		var p VisitorPoint
		if err := rows.Scan(&p.Time, &p.Events, &p.Visitors); err != nil {
			return nil, fmt.Errorf("visitors curve %s: %w", k, err)
		}
		p.Time = p.Time.UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("visitors curve %s: %w", k, err)
	}
	return out, nil
}

// RankedVisitors is one row of a top-N by visitors.
type RankedVisitors struct {
	Kind, Subject    string
	Visitors, Events int64
}

// TopVisitors returns the n subjects of the action with the most distinct
// visitors in [from, to); zero from and to rank by all-time sketches.
func (q *Querier) TopVisitors(ctx context.Context, action, kind string, from, to time.Time, n int) ([]RankedVisitors, error) {
	var f, t any
	if !from.IsZero() || !to.IsZero() {
		f, t = from, to
		if to.IsZero() {
			t = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
		}
	}
	rows, err := q.db.Query(ctx, `SELECT kind, subject, visitors, events FROM `+qualify("top_visitors")+`($1, $2, $3, $4, $5)`,
		action, f, t, n, nullable(kind))
	if err != nil {
		return nil, fmt.Errorf("top visitors %s: %w", action, err)
	}
	defer rows.Close()
	var out []RankedVisitors
	for rows.Next() {
		var r RankedVisitors
		if err := rows.Scan(&r.Kind, &r.Subject, &r.Visitors, &r.Events); err != nil {
			return nil, fmt.Errorf("top visitors %s: %w", action, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("top visitors %s: %w", action, err)
	}
	return out, nil
}
