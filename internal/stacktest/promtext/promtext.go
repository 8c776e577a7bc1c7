// Package promtext reads the Prometheus text exposition of floodgate's
// processes into one value per series, so that tests and the benchmark
// suites compare counters by name and labels rather than by regular
// expressions over the text.
//
//	s, err := promtext.Scrape(ctx, "http://"+addr+"/metrics")
//	applied := s.Sum("floodgate_aggregator_messages_in_total", `group="live"`)
package promtext

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one scrape of a Prometheus text endpoint: series (name plus
// labels, as written) to value.
type Sample map[string]float64

// Scrape reads a Prometheus text exposition from url.
func Scrape(ctx context.Context, url string) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return Parse(resp.Body)
}

// Parse parses the Prometheus text format into one value per series.
// Counters, gauges and untyped metrics keep their name; histograms and
// summaries give their _sum and _count series.
func Parse(r io.Reader) (Sample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	s := Sample{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := seriesLabels(m.GetLabel())
			switch {
			case m.Counter != nil:
				s[name+labels] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				s[name+labels] = m.GetGauge().GetValue()
			case m.Untyped != nil:
				s[name+labels] = m.GetUntyped().GetValue()
			case m.Histogram != nil:
				s[name+"_sum"+labels] = m.GetHistogram().GetSampleSum()
				s[name+"_count"+labels] = float64(m.GetHistogram().GetSampleCount())
			case m.Summary != nil:
				s[name+"_sum"+labels] = m.GetSummary().GetSampleSum()
				s[name+"_count"+labels] = float64(m.GetSummary().GetSampleCount())
			}
		}
	}
	return s, nil
}

// seriesLabels writes labels as the text format does: {k="v",...}, or
// nothing without labels.
func seriesLabels(ls []*dto.LabelPair) string {
	if len(ls) == 0 {
		return ""
	}
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.GetName() + "=" + strconv.Quote(l.GetValue())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// Sum adds every series of a metric name whose labels contain all of the
// given label="value" pairs.
func (s Sample) Sum(name string, labels ...string) float64 {
	var t float64
	for series, v := range s {
		n, l, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		ok := true
		for _, want := range labels {
			if !strings.Contains(l, want) {
				ok = false
				break
			}
		}
		if ok {
			t += v
		}
	}
	return t
}

// Has reports whether any series of the metric name is present.
func (s Sample) Has(name string) bool {
	for series := range s {
		if n, _, _ := strings.Cut(series, "{"); n == name {
			return true
		}
	}
	return false
}
