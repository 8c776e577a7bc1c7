package history

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"floodgate/timespan"
)

var sparks = []rune("▁▂▃▄▅▆▇█")

// Sparkline draws one character per point, scaled to the largest value; a
// zero is a space so gaps read as gaps.
func Sparkline(points []Point) string {
	var hi int64
	for _, p := range points {
		hi = max(hi, p.Value)
	}
	var b strings.Builder
	for _, p := range points {
		switch {
		case p.Value <= 0 || hi == 0:
			b.WriteRune(' ')
		default:
			b.WriteRune(sparks[int((p.Value*int64(len(sparks)-1)+hi-1)/hi)])
		}
	}
	return b.String()
}

// bar is a horizontal bar of at most width cells for v out of hi, in
// eighths of a cell.
func bar(v, hi int64, width int) string {
	if v <= 0 || hi <= 0 {
		return ""
	}
	eighths := int((v*int64(width)*8 + hi - 1) / hi)
	s := strings.Repeat("█", eighths/8)
	if r := eighths % 8; r > 0 {
		s += string([]rune("▏▎▍▌▋▊▉")[r-1])
	}
	return s
}

// WriteCurve prints a sparkline, then one line per point: time, value and a
// bar.
func WriteCurve(w io.Writer, points []Point, step time.Duration) error {
	var hi, sum int64
	for _, p := range points {
		hi = max(hi, p.Value)
		sum += p.Value
	}
	layout := "2006-01-02 15:04"
	if step%(24*time.Hour) == 0 {
		layout = time.DateOnly
	}
	if _, err := fmt.Fprintf(w, "%s  total %d, peak %d, step %s\n", Sparkline(points), sum, hi, timespan.Format(step)); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, p := range points {
		fmt.Fprintf(tw, "%s\t%d\t \t%s\n", p.Time.Format(layout), p.Value, bar(p.Value, hi, 40))
	}
	return tw.Flush()
}

// WriteVisitorsCurve prints a sparkline of the visitors, then one line per
// step: time, events, unique visitors and a bar of the visitors.
func WriteVisitorsCurve(w io.Writer, points []VisitorPoint, step time.Duration) error {
	var hi, events int64
	spark := make([]Point, len(points))
	for i, p := range points {
		hi = max(hi, p.Visitors)
		events += p.Events
		spark[i] = Point{Time: p.Time, Value: p.Visitors}
	}
	layout := "2006-01-02 15:04"
	if step%(24*time.Hour) == 0 {
		layout = time.DateOnly
	}
	if _, err := fmt.Fprintf(w, "%s  events %d, peak %d unique visitors per %s\n", Sparkline(spark), events, hi, timespan.Format(step)); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\tevents\tvisitors\t \t\n")
	for _, p := range points {
		fmt.Fprintf(tw, "%s\t%d\t%d\t \t%s\n", p.Time.Format(layout), p.Events, p.Visitors, bar(p.Visitors, hi, 40))
	}
	return tw.Flush()
}

// WriteTopVisitors prints a ranking by unique visitors with bars.
func WriteTopVisitors(w io.Writer, rows []RankedVisitors) error {
	var hi int64
	for _, r := range rows {
		hi = max(hi, r.Visitors)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, r := range rows {
		fmt.Fprintf(tw, "%2d.\t%s:%s\t%d visitors\t%d events\t%s\n", i+1, r.Kind, r.Subject, r.Visitors, r.Events, bar(r.Visitors, hi, 30))
	}
	return tw.Flush()
}

// WriteTop prints a ranking with bars.
func WriteTop(w io.Writer, rows []Ranked) error {
	var hi int64
	for _, r := range rows {
		hi = max(hi, r.Value)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, r := range rows {
		fmt.Fprintf(tw, "%2d.\t%s:%s\t%d\t%s\n", i+1, r.Kind, r.Subject, r.Value, bar(r.Value, hi, 30))
	}
	return tw.Flush()
}

// AutoStep picks a round step giving at most about max points over span.
func AutoStep(span time.Duration, maxPoints int) time.Duration {
	for _, s := range []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, 3 * time.Hour,
		6 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour} {
		if span/s <= time.Duration(maxPoints) {
			return s
		}
	}
	return 28 * 24 * time.Hour
}

// Dashboard is the terminal dashboard of one action (every action when
// Action is empty).
type Dashboard struct {
	Now     time.Time
	Actions []Ranked // action totals (Subject holds the action)
	Action  string
	Total   int64    // all time, late events included
	Last24h int64    // bucket counts over the last 24 hours
	Late    int64    // events in totals only (older than every horizon)
	TopDay  []Ranked // top subjects over the last 24 hours
	TopEver []Ranked // top subjects by all-time totals
	Hourly  []Point  // last 24 hours, per hour
	Daily   []Point  // last 30 days, per day
	// Unique visitors, for an action history counts them of (else zero).
	VisitorsEver    int64
	VisitorsLast24h int64
	TopVisitorsDay  []RankedVisitors // top subjects by visitors over the last 24 hours
}

// LoadDashboard reads a Dashboard for action as of now.
func LoadDashboard(ctx context.Context, q *Querier, action string, now time.Time, top int) (*Dashboard, error) {
	d := &Dashboard{Now: now.UTC(), Action: action}
	var err error
	if d.Actions, err = q.Actions(ctx); err != nil {
		return nil, err
	}
	if action == "" {
		if len(d.Actions) == 0 {
			return d, nil
		}
		best := d.Actions[0]
		for _, a := range d.Actions {
			if a.Value > best.Value {
				best = a
			}
		}
		d.Action = best.Subject
	}
	k := Key{Action: d.Action}
	end := Bin(now, time.Hour).Add(time.Hour)
	if d.Total, err = q.Total(ctx, k); err != nil {
		return nil, err
	}
	if d.Last24h, err = q.Count(ctx, k, end.Add(-24*time.Hour), end); err != nil {
		return nil, err
	}
	if d.Late, err = q.Late(ctx, d.Action); err != nil {
		return nil, err
	}
	if d.TopDay, err = q.Top(ctx, d.Action, "", end.Add(-24*time.Hour), end, top); err != nil {
		return nil, err
	}
	if d.TopEver, err = q.Top(ctx, d.Action, "", time.Time{}, time.Time{}, top); err != nil {
		return nil, err
	}
	if d.Hourly, err = q.Curve(ctx, k, end.Add(-24*time.Hour), end, time.Hour); err != nil {
		return nil, err
	}
	dayEnd := Bin(now, 24*time.Hour).Add(24 * time.Hour)
	if d.Daily, err = q.Curve(ctx, k, dayEnd.Add(-30*24*time.Hour), dayEnd, 24*time.Hour); err != nil {
		return nil, err
	}
	return d, d.loadVisitors(ctx, q, end, top)
}

// loadVisitors reads the unique visitors of the dashboard's action, if
// history counts them for it.
func (d *Dashboard) loadVisitors(ctx context.Context, q *Querier, end time.Time, top int) error {
	k := Key{Action: d.Action}
	var err error
	if d.VisitorsEver, err = q.TotalVisitors(ctx, k); err != nil || d.VisitorsEver == 0 {
		return err
	}
	if d.VisitorsLast24h, err = q.Visitors(ctx, k, end.Add(-24*time.Hour), end); err != nil {
		return err
	}
	d.TopVisitorsDay, err = q.TopVisitors(ctx, d.Action, "", end.Add(-24*time.Hour), end, top)
	return err
}

// Write prints the dashboard.
func (d *Dashboard) Write(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "floodgate history — %s UTC\n\n", d.Now.Format("2006-01-02 15:04"))
	if len(d.Actions) == 0 {
		fmt.Fprintln(ew, "no events recorded yet")
		return ew.err
	}
	fmt.Fprintln(ew, "TOTALS (all time)")
	var hi int64
	for _, a := range d.Actions {
		hi = max(hi, a.Value)
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	for _, a := range d.Actions {
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", a.Subject, a.Value, bar(a.Value, hi, 30))
	}
	tw.Flush()
	fmt.Fprintf(ew, "\nACTION %s: %d ever, %d in the last 24h", d.Action, d.Total, d.Last24h)
	if d.Late > 0 {
		fmt.Fprintf(ew, ", %d late (in totals only)", d.Late)
	}
	fmt.Fprintln(ew)
	if d.VisitorsEver > 0 {
		fmt.Fprintf(ew, "UNIQUE VISITORS: %d ever, %d in the last 24h\n", d.VisitorsEver, d.VisitorsLast24h)
	}
	fmt.Fprintf(ew, "\nLAST 30 DAYS  %s\n", Sparkline(d.Daily))
	fmt.Fprintln(ew, "\nLAST 24 HOURS")
	if err := WriteCurve(ew, d.Hourly, time.Hour); err != nil {
		return err
	}
	fmt.Fprintln(ew, "\nTOP SUBJECTS, LAST 24 HOURS")
	if err := WriteTop(ew, d.TopDay); err != nil {
		return err
	}
	fmt.Fprintln(ew, "\nTOP SUBJECTS, ALL TIME")
	if err := WriteTop(ew, d.TopEver); err != nil {
		return err
	}
	if d.VisitorsEver > 0 {
		fmt.Fprintln(ew, "\nTOP SUBJECTS BY UNIQUE VISITORS, LAST 24 HOURS")
		if err := WriteTopVisitors(ew, d.TopVisitorsDay); err != nil {
			return err
		}
	}
	return ew.err
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
