package history

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-dev/floodgate/internal/timespan"
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

// Bar is a horizontal bar of at most width cells for v out of hi, in
// eighths of a cell.
func Bar(v, hi int64, width int) string {
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
		fmt.Fprintf(tw, "%s\t%d\t \t%s\n", p.Time.Format(layout), p.Value, Bar(p.Value, hi, 40))
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
		fmt.Fprintf(tw, "%s\t%d\t%d\t \t%s\n", p.Time.Format(layout), p.Events, p.Visitors, Bar(p.Visitors, hi, 40))
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
		fmt.Fprintf(tw, "%2d.\t%s:%s\t%d visitors\t%d events\t%s\n", i+1, r.Kind, r.Subject, r.Visitors, r.Events, Bar(r.Visitors, hi, 30))
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
		fmt.Fprintf(tw, "%2d.\t%s:%s\t%d\t%s\n", i+1, r.Kind, r.Subject, r.Value, Bar(r.Value, hi, 30))
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
