package backtest

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/floodgate-dev/floodgate/internal/window"
)

// WriteJSON writes the whole report as one JSON document.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("backtest: write json: %w", err)
	}
	return nil
}

// csvHeader is the header of WriteCSV.
var csvHeader = []string{"rules", "action", "kind", "subject", "rule", "limit", "shadow", "decisions", "first", "last", "deny_seconds", "change"}

// WriteCSV writes one row per subject and limit denied, candidate first
// ("rules" is candidate or baseline). With a baseline, "change" says what
// became of the subject under that rule: new, gone, changed or same.
func WriteCSV(w io.Writer, r *Report) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(csvHeader)
	change := map[ruleKey]string{}
	for _, c := range r.Changes {
		change[ruleKey{c.Action, c.Kind, c.Subject, c.Rule, c.Shadow}] = c.Change
	}
	rows := func(set string, o *Outcome) {
		if o == nil {
			return
		}
		for _, d := range o.Denies {
			ch := ""
			if r.Baseline != nil {
				ch = cmp.Or(change[ruleKey{d.Action, d.Kind, d.Subject, d.Rule, d.Shadow}], "same")
			}
			_ = cw.Write([]string{set, d.Action, d.Kind, d.Subject, d.Rule, d.Limit, strconv.FormatBool(d.Shadow),
				strconv.Itoa(d.Decisions), stamp(d.First), stamp(d.Last), strconv.FormatFloat(d.DenySeconds, 'f', -1, 64), ch})
		}
	}
	rows(Candidate, r.Candidate)
	rows(Baseline, r.Baseline)
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("backtest: write csv: %w", err)
	}
	return nil
}

// WriteText writes the readable report: what was replayed, per rules set
// a table per limit and the top subjects by deny time (top < 0: all), and
// with a baseline the changes (top of each kind).
func WriteText(w io.Writer, r *Report, top int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, a ...any) { fmt.Fprintf(tw, format, a...) }
	writeHeader(p, r)
	for _, o := range []*Outcome{r.Candidate, r.Baseline} {
		if o != nil {
			writeOutcome(p, o, top)
		}
	}
	if r.Baseline != nil {
		writeChanges(p, r, top)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("backtest: write report: %w", err)
	}
	return nil
}

func writeHeader(p func(string, ...any), r *Report) {
	p("backtest %s .. %s (replayed from %s: the warm-up fills windows and deny records; nothing of it is reported)\n",
		r.From.Format(time.RFC3339), r.To.Format(time.RFC3339), r.ReadFrom.Format(time.RFC3339))
	if r.Source == "history" {
		p("source: PostgreSQL minute buckets (the topic no longer holds the range: %s)\n", r.Retention)
		p("precision: %s\n", r.Precision)
		for _, d := range r.Dropped {
			p("not evaluated: %s\n", d)
		}
		p("%s minute rows over %d partitions in %.1f s (%s rows/s)", human(r.Messages), r.Partitions, r.Seconds, human(int64(r.EventsPerSecond)))
	} else {
		p("source: topic %s, %d partitions, clock %s (%s)\n", r.Topic, r.Partitions, r.Clock, r.Precision)
		p("%s messages, %s events replayed in %.1f s: %s events/s", human(r.Messages), human(r.Events), r.Seconds, human(int64(r.EventsPerSecond)))
		if len(r.Rejected) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(r.Rejected)) {
				parts = append(parts, fmt.Sprintf("%s %d", k, r.Rejected[k]))
			}
			p("; refused as the aggregator would: %s", strings.Join(parts, ", "))
		}
	}
	if r.RedisPeakBytes > 0 {
		p("; replay redis peak %.1f MiB", float64(r.RedisPeakBytes)/(1<<20))
	}
	p("\n")
}

func writeOutcome(p func(string, ...any), o *Outcome, top int) {
	p("\n%s: %d subjects denied under %d limits\n", o.Rules, len(o.Denies), len(o.Limits))
	if len(o.Limits) == 0 {
		return
	}
	p("RULE\tLIMIT\tSHADOW\tSUBJECTS\tDECISIONS\tFIRST\tLAST\tDENY-SECONDS\n")
	for _, l := range o.Limits {
		p("%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", l.Rule, l.Limit, yesNo(l.Shadow), l.Subjects, l.Decisions, stamp(l.First), stamp(l.Last), secs(l.DenySeconds))
	}
	denies := slices.Clone(o.Denies)
	slices.SortStableFunc(denies, func(a, b Deny) int { return cmp.Compare(b.DenySeconds, a.DenySeconds) })
	shown := denies
	if top >= 0 && len(shown) > top {
		shown = shown[:top]
	}
	p("\nSUBJECT\tRULE\tLIMIT\tSHADOW\tDECISIONS\tFIRST\tLAST\tDENY-SECONDS\n")
	for _, d := range shown {
		p("%s %s %s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.Action, d.Kind, d.Subject, d.Rule, d.Limit, yesNo(d.Shadow), d.Decisions, stamp(d.First), stamp(d.Last), secs(d.DenySeconds))
	}
	if len(shown) < len(denies) {
		p("(%d more: --top 0, --json or --csv list them all)\n", len(denies)-len(shown))
	}
}

func writeChanges(p func(string, ...any), r *Report, top int) {
	count := map[string]int{}
	for _, c := range r.Changes {
		count[c.Change]++
	}
	p("\nchanges, %s against %s: %d newly denied, %d no longer denied, %d denied differently, %d alike\n",
		r.Candidate.Rules, r.Baseline.Rules, count[ChangeNew], count[ChangeGone], count[ChangeChanged], r.Unchanged)
	if len(r.Changes) == 0 {
		return
	}
	p("CHANGE\tSUBJECT\tRULE\tCANDIDATE\tBASELINE\n")
	shown := map[string]int{}
	for _, c := range r.Changes {
		if top >= 0 && shown[c.Change] >= top {
			continue
		}
		shown[c.Change]++
		rule := c.Rule
		if c.Shadow {
			rule += " (shadow)"
		}
		p("%s\t%s %s %s\t%s\t%s\t%s\n", c.Change, c.Action, c.Kind, c.Subject, rule, sideText(c.Candidate), sideText(c.Baseline))
	}
	for _, k := range []string{ChangeNew, ChangeGone, ChangeChanged} {
		if n := count[k] - shown[k]; n > 0 {
			p("(%d more %s: --top 0, --json or --csv list them all)\n", n, k)
		}
	}
}

func sideText(s *Side) string {
	if s == nil {
		return "not denied"
	}
	return fmt.Sprintf("%s: %s, %s s denied from %s", limitsText(s.Limits), plural(s.Decisions, "decision"), secs(s.DenySeconds), stamp(s.First))
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func secs(s float64) string { return strconv.FormatFloat(s, 'f', -1, 64) }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// DecisionLog writes decisions as NDJSON, one floodgate.decisions message
// value a line with the rules set it came from ("rules": candidate or
// baseline). Its Add is an OnDecision hook, safe for concurrent use.
type DecisionLog struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
}

// NewDecisionLog writes to w.
func NewDecisionLog(w io.Writer) *DecisionLog { return &DecisionLog{w: bufio.NewWriter(w)} }

// Add writes one decision; the first error is kept for Flush.
func (l *DecisionLog) Add(set string, d window.DecisionMessage) {
	b, err := json.Marshal(d)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	if err != nil {
		l.err = err
		return
	}
	// {"rules":"candidate", then the decision's own fields.
	fmt.Fprintf(l.w, "{\"rules\":%q,", set)
	l.w.Write(b[1:])
	l.err = l.w.WriteByte('\n')
}

// Flush writes what is buffered and returns the first error.
func (l *DecisionLog) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	return l.w.Flush()
}
