package dashboard

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-dev/floodgate/internal/history"
)

// TerminalSpans are the curves of `floodgate query summary`: the last day
// per hour and the last 30 days per day, a length a terminal shows whole.
var TerminalSpans = []Span{{Name: "24 hours", Span: 24 * time.Hour, Step: time.Hour}, {Name: "30 days", Span: 30 * 24 * time.Hour, Step: 24 * time.Hour}}

// maxTextLines is the most points a curve is listed with in text; a longer
// one is drawn as its sparkline only.
const maxTextLines = 24

// WriteText prints the summary for a terminal: the page's totals, counts,
// curves and top subjects (not its decisions, which only the web page
// follows).
func (s *Summary) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "floodgate history — %s UTC\n\n", s.Now.Format("2006-01-02 15:04"))
	if len(s.Totals) == 0 {
		fmt.Fprintln(ew, "no events recorded yet")
		return ew.err
	}
	fmt.Fprintln(ew, "TOTALS (all time)")
	var hi int64
	for _, a := range s.Totals {
		hi = max(hi, a.Total)
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	for _, a := range s.Totals {
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", a.Action, a.Total, history.Bar(a.Total, hi, 30))
	}
	tw.Flush()
	what := s.Action
	if s.Kind != "" {
		what += " (kind " + s.Kind + ")"
	}
	fmt.Fprintf(ew, "\nACTION %s: %d ever, %d in the last 24h, %d in the last hour", what, s.Total, s.LastDay, s.LastHour)
	if s.Late > 0 {
		fmt.Fprintf(ew, ", %d late (in totals only)", s.Late)
	}
	fmt.Fprintln(ew)
	if v := s.Visitors; v != nil {
		fmt.Fprintf(ew, "UNIQUE VISITORS: %d ever, %d in the last 24h, %d in the last hour\n", v.Total, v.LastDay, v.LastHour)
	}
	for _, c := range s.Curves {
		name := strings.ToUpper(c.Name)
		if len(c.Points) > maxTextLines {
			fmt.Fprintf(ew, "\nLAST %s  %s  total %d, peak %d, step %s\n", name, history.Sparkline(c.Points), c.Total, c.Peak, c.Step)
			continue
		}
		fmt.Fprintf(ew, "\nLAST %s\n", name)
		if err := history.WriteCurve(ew, c.Points, c.step); err != nil {
			return err
		}
	}
	fmt.Fprintln(ew, "\nTOP SUBJECTS, LAST 24 HOURS")
	if err := history.WriteTop(ew, unranked(s.TopDay)); err != nil {
		return err
	}
	fmt.Fprintln(ew, "\nTOP SUBJECTS, ALL TIME")
	if err := history.WriteTop(ew, unranked(s.TopEver)); err != nil {
		return err
	}
	if v := s.Visitors; v != nil {
		fmt.Fprintln(ew, "\nTOP SUBJECTS BY UNIQUE VISITORS, LAST 24 HOURS")
		rs := make([]history.RankedVisitors, len(v.TopDay))
		for i, r := range v.TopDay {
			rs[i] = history.RankedVisitors{Kind: r.Kind, Subject: r.Subject, Visitors: r.Visitors, Events: r.Events}
		}
		if err := history.WriteTopVisitors(ew, rs); err != nil {
			return err
		}
	}
	return ew.err
}

func unranked(rs []Ranked) []history.Ranked {
	out := make([]history.Ranked, len(rs))
	for i, r := range rs {
		out[i] = history.Ranked{Kind: r.Kind, Subject: r.Subject, Value: r.Value}
	}
	return out
}

// errWriter keeps the first error of a run of prints.
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
