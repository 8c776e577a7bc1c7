package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

func listen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

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
	return ParseMetrics(resp.Body)
}

// ParseMetrics parses the Prometheus text format, keeping every sample line.
func ParseMetrics(r io.Reader) (Sample, error) {
	s := Sample{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		// The value follows the last space outside the labels.
		end := strings.LastIndexByte(line, '}')
		rest := line
		if end >= 0 {
			rest = line[end+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		series := line
		if end >= 0 {
			series = line[:end+1]
		} else {
			series = strings.Fields(line)[0]
			fields = fields[1:]
			if len(fields) == 0 {
				continue
			}
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		s[series] = v
	}
	return s, sc.Err()
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

// WaitHTTP polls url until it answers 200 or ctx ends.
func WaitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last error %v)", url, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
