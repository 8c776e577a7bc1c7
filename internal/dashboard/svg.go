package dashboard

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"
)

// Chart geometry, in SVG user units (the chart scales to its box).
const (
	chartW, chartH = 720, 170
	padL, padR     = 52, 8
	padT, padB     = 10, 22
)

// SVG draws c as a bar chart: one bar per step, a y axis up to a round
// maximum, and about six time labels; with visitors, a line of each step's
// unique visitors over the bars, on the same axis (a step's visitors never
// exceed its events). Rendered on the server, so the page needs no chart
// library; each bar's title tells its time and values.
func SVG(c Curve) template.HTML {
	var b strings.Builder
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	top := niceCeil(c.Peak)
	vis := ""
	if c.Visitors != nil {
		vis = fmt.Sprintf(", at most %d unique visitors a step", c.PeakVisitors)
	}
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s: %d events%s, step %s" data-total="%d">`,
		chartW, chartH, template.HTMLEscapeString(c.Name), c.Total, vis, c.Step, c.Total)
	// Grid lines and y labels at 0, half and top.
	for _, f := range []float64{0, 0.5, 1} {
		y := float64(padT) + plotH*(1-f)
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, padL, chartW-padR, y, y)
		fmt.Fprintf(&b, `<text class="axis" x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-6, y+4, short(int64(f*float64(top))))
	}
	n := len(c.Points)
	if n > 0 {
		bw := plotW / float64(n)
		gap := 0.0
		if bw > 3 {
			gap = bw * 0.15
		}
		for i, p := range c.Points {
			if p.Value <= 0 {
				continue
			}
			h := plotH * float64(p.Value) / float64(top)
			x := float64(padL) + float64(i)*bw
			vis := ""
			if i < len(c.Visitors) {
				vis = fmt.Sprintf(", %d unique visitors", c.Visitors[i])
			}
			fmt.Fprintf(&b, `<rect class="bar" x="%.2f" y="%.2f" width="%.2f" height="%.2f"><title>%s: %d%s</title></rect>`,
				x+gap/2, float64(padT)+plotH-h, max(bw-gap, 0.5), h, label(p.Time, c.step, true), p.Value, vis)
		}
		if len(c.Visitors) == n {
			b.WriteString(`<polyline class="visitors" points="`)
			for i, v := range c.Visitors {
				fmt.Fprintf(&b, "%.2f,%.2f ", float64(padL)+(float64(i)+0.5)*bw, float64(padT)+plotH*(1-float64(v)/float64(top)))
			}
			b.WriteString(`"/>`)
		}
		// Time labels: about six, on whole steps.
		every := max(n/6, 1)
		for i := 0; i < n; i += every {
			x := float64(padL) + (float64(i)+0.5)*bw
			fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x, chartH-6, label(c.Points[i].Time, c.step, false))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every interpolated string is escaped or ours
}

// label formats a step's time for its resolution (UTC).
func label(t time.Time, step time.Duration, long bool) string {
	t = t.UTC()
	switch {
	case step >= 24*time.Hour && long:
		return t.Format("Mon 2 Jan 2006")
	case step >= 24*time.Hour:
		return t.Format("2 Jan")
	case long:
		return t.Format("2 Jan 15:04")
	case step >= time.Hour:
		return t.Format("2 Jan 15h")
	default:
		return t.Format("15:04")
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(v int64) int64 {
	if v <= 1 {
		return 1
	}
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
	}
}

// short formats a count compactly: 950, 12k, 3.4M.
func short(v int64) string {
	switch {
	case v >= 10_000_000:
		return strconv.FormatInt(v/1_000_000, 10) + "M"
	case v >= 1_000_000:
		return strconv.FormatFloat(float64(v)/1e6, 'f', 1, 64) + "M"
	case v >= 10_000:
		return strconv.FormatInt(v/1000, 10) + "k"
	default:
		return strconv.FormatInt(v, 10)
	}
}

// thousands formats v with thin spaces between groups of three digits.
func thousands(v int64) string {
	s := strconv.FormatInt(v, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
