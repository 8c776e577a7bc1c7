package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// JavaTools runs Kafka's own performance tools (artifact kafka-tools) from
// the classpath of the local stack's Kafka (FLOODGATE_KAFKA_CLASSPATH).
type JavaTools struct {
	Classpath string
	Heap      string // -Xmx, default 512m
}

// NewJavaTools reads FLOODGATE_KAFKA_CLASSPATH.
func NewJavaTools() (*JavaTools, error) {
	cp := os.Getenv("FLOODGATE_KAFKA_CLASSPATH")
	if cp == "" {
		return nil, errors.New("FLOODGATE_KAFKA_CLASSPATH is not set: eval \"$(scripts/stack env)\"")
	}
	if _, err := exec.LookPath("java"); err != nil {
		return nil, fmt.Errorf("java not found: %w", err)
	}
	return &JavaTools{Classpath: cp, Heap: "512m"}, nil
}

// Command returns the command line of a tool class with args, as run.
func (j *JavaTools) Command(class string, args ...string) []string {
	return append([]string{"java", "-Xmx" + j.Heap, "-cp", j.Classpath, class}, args...)
}

// run runs a tool class to its end; cpu is the CPU time, user and system,
// its JVM used (start-up included).
func (j *JavaTools) run(ctx context.Context, class string, args ...string) (out string, cpu time.Duration, err error) {
	argv := j.Command(class, args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err = cmd.Run()
	if st := cmd.ProcessState; st != nil {
		cpu = st.UserTime() + st.SystemTime()
	}
	if err != nil {
		return buf.String(), cpu, fmt.Errorf("%s: %w: %s", class, err, lastLines(buf.String(), 5))
	}
	return buf.String(), cpu, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// ProducerPerfResult is the final line of ProducerPerformance.
type ProducerPerfResult struct {
	Records     int64
	PerSec      float64
	P50ms       float64
	P99ms       float64
	CommandLine string
}

var (
	rePerfFinal = regexp.MustCompile(`(\d+) records sent, ([\d.]+) records/sec.*?(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th`)
)

// ProducerPerformance runs org.apache.kafka.tools.ProducerPerformance and
// parses its final summary line.
func (j *JavaTools) ProducerPerformance(ctx context.Context, args ...string) (ProducerPerfResult, error) {
	const class = "org.apache.kafka.tools.ProducerPerformance"
	res := ProducerPerfResult{CommandLine: strings.Join(j.Command(class, args...), " ")}
	out, _, err := j.run(ctx, class, args...)
	if err != nil {
		return res, err
	}
	m := rePerfFinal.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return res, fmt.Errorf("ProducerPerformance: no summary line in output: %s", lastLines(out, 5))
	}
	last := m[len(m)-1]
	res.Records, _ = strconv.ParseInt(last[1], 10, 64)
	res.PerSec, _ = strconv.ParseFloat(last[2], 64)
	res.P50ms, _ = strconv.ParseFloat(last[3], 64)
	res.P99ms, _ = strconv.ParseFloat(last[5], 64)
	return res, nil
}

// ConsumerPerfResult holds ConsumerPerformance's summary columns.
type ConsumerPerfResult struct {
	Messages    int64
	PerSec      float64 // nMsg.sec: over the whole run, group join included
	FetchPerSec float64 // fetch.nMsg.sec: after the group join
	RebalanceMS float64
	// SteadyPerSec is the rate from the first progress line at or past a
	// quarter of the messages to the last one (ConsumerPerformanceSteady):
	// the JIT warm and the group joined. 0 from ConsumerPerformance.
	SteadyPerSec float64
	// CPU is the CPU time the tool's JVM used, start-up and group join
	// included.
	CPU         time.Duration
	CommandLine string
}

// ConsumerPerformance runs org.apache.kafka.tools.ConsumerPerformance and
// parses its CSV summary.
func (j *JavaTools) ConsumerPerformance(ctx context.Context, args ...string) (ConsumerPerfResult, error) {
	const class = "org.apache.kafka.tools.ConsumerPerformance"
	res := ConsumerPerfResult{CommandLine: strings.Join(j.Command(class, args...), " ")}
	out, cpu, err := j.run(ctx, class, args...)
	res.CPU = cpu
	if err != nil {
		return res, err
	}
	var header []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "start.time") {
			header = splitCSV(line)
			continue
		}
		if header == nil || line == "" {
			continue
		}
		vals := splitCSV(line)
		if len(vals) != len(header) {
			continue
		}
		col := map[string]string{}
		for i, h := range header {
			col[h] = vals[i]
		}
		res.Messages, _ = strconv.ParseInt(col["data.consumed.in.nMsg"], 10, 64)
		res.PerSec, _ = strconv.ParseFloat(col["nMsg.sec"], 64)
		res.FetchPerSec, _ = strconv.ParseFloat(col["fetch.nMsg.sec"], 64)
		res.RebalanceMS, _ = strconv.ParseFloat(col["rebalance.time.ms"], 64)
		return res, nil
	}
	return res, fmt.Errorf("ConsumerPerformance: no summary in output: %s", lastLines(out, 5))
}

// ConsumerPerformanceSteady runs ConsumerPerformance with a progress line
// every 200 ms (--show-detailed-stats: then it prints no summary) and
// returns its steady rate: messages from the first line at or past a
// quarter of want to the last line, over the time between them. Short runs
// of the tool are mostly JVM start-up and warm-up; this is the rate the
// live aggregator's steady window is set against.
func (j *JavaTools) ConsumerPerformanceSteady(ctx context.Context, want int64, args ...string) (ConsumerPerfResult, error) {
	const class = "org.apache.kafka.tools.ConsumerPerformance"
	args = append(args, "--show-detailed-stats", "--reporting-interval", "200")
	res := ConsumerPerfResult{CommandLine: strings.Join(j.Command(class, args...), " ")}
	out, cpu, err := j.run(ctx, class, args...)
	res.CPU = cpu
	if err != nil {
		return res, err
	}
	rate, last, err := steadyRate(out, want/4)
	if err != nil {
		return res, fmt.Errorf("ConsumerPerformance: %w: %s", err, lastLines(out, 5))
	}
	res.SteadyPerSec, res.Messages = rate, last
	return res, nil
}

// steadyRate reads ConsumerPerformance's progress lines ("time, threadId,
// data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, ...", the time as
// 2006-01-02 15:04:05:000, the messages cumulative) and returns the rate
// from the first line with at least from messages to the last line, and
// the last line's messages.
func steadyRate(out string, from int64) (rate float64, last int64, err error) {
	var t0, t1 time.Time
	var n0, n1 int64
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		vals := splitCSV(sc.Text())
		if len(vals) < 6 {
			continue
		}
		at, terr := progressTime(vals[0])
		n, nerr := strconv.ParseInt(vals[4], 10, 64)
		if terr != nil || nerr != nil {
			continue
		}
		if t0.IsZero() && n >= from {
			t0, n0 = at, n
		}
		t1, n1 = at, n
	}
	if t0.IsZero() || !t1.After(t0) || n1 <= n0 {
		return 0, n1, errors.New("too few progress lines past a quarter of the messages to time a steady rate")
	}
	return float64(n1-n0) / t1.Sub(t0).Seconds(), n1, nil
}

// progressTime parses ConsumerPerformance's "2006-01-02 15:04:05:123":
// milliseconds after a colon, which no Go layout reads.
func progressTime(s string) (time.Time, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return time.Time{}, fmt.Errorf("progress time %q", s)
	}
	t, err := time.Parse(time.DateTime, s[:i])
	if err != nil {
		return t, err
	}
	ms, err := strconv.Atoi(s[i+1:])
	return t.Add(time.Duration(ms) * time.Millisecond), err
}

func splitCSV(line string) []string {
	parts := strings.Split(line, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}
