package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/backtest"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/stacktest/servicetest"
)

// TestBacktestCommand runs `floodgate backtest` over a small topic: the
// flags reach the package (range, rules and baseline, JSON report, the
// decisions file), and bad input is a clear error.
func TestBacktestCommand(t *testing.T) {
	brokers := stacktest.Brokers(t)
	redisServer := stacktest.RedisServer(t)
	topic := stacktest.Topic(t, brokers, 2)
	bin := servicetest.Build(t, servicetest.Floodgate)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cand := write("candidate.yaml", "rules:\n  - name: login\n    action: login_failed\n    kinds: [ip]\n    limits: [3/m]\n")
	base := write("current.yaml", "rules:\n  - name: login\n    action: login_failed\n    kinds: [ip]\n    limits: [10/m]\n")

	// 5 failed logins of one IP within a minute, an hour ago: over 3/m, not
	// over 10/m.
	at := time.Now().Add(-time.Hour).Truncate(time.Second)
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Murmur2Balancer{Consistent: true}, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	var msgs []kafka.Message
	for i := range 5 {
		e := event.Event{V: 1, ID: event.NewID(), Action: "login_failed", Kind: "ip", Subject: "192.0.2.77", TS: at.Add(time.Duration(i) * time.Second), N: 1}
		v, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(e.Key()), Value: v, Time: e.TS})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}

	decisions := filepath.Join(dir, "decisions.ndjson")
	run := func(args ...string) (string, string, error) {
		cmd := exec.Command(bin, append([]string{"backtest", "--brokers", strings.Join(brokers, ","), "--topic", topic,
			"--redis-server", redisServer, "--progress", "0"}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	out, stderr, err := run("--rules", cand, "--baseline", base, "--from", "2h", "--to", "now", "--json", "--decisions", decisions)
	if err != nil {
		t.Fatalf("backtest: %v\n%s", err, stderr)
	}
	var rep backtest.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if rep.Source != "kafka" || rep.Events != 5 || rep.Candidate.Rules != cand || rep.Baseline.Rules != base ||
		len(rep.Candidate.Denies) != 1 || rep.Candidate.Denies[0].Subject != "192.0.2.77" || len(rep.Baseline.Denies) != 0 ||
		len(rep.Changes) != 1 || rep.Changes[0].Change != backtest.ChangeNew {
		t.Fatalf("report:\n%s", out)
	}
	// The 4th event (second 3) is over 3/m, until the 2nd leaves the window.
	d := rep.Candidate.Denies[0]
	if !d.First.Equal(at.Add(3*time.Second)) || !d.Last.Equal(at.Add(61*time.Second)) || d.Decisions != 1 {
		t.Fatalf("deny %+v: want from +3s until +61s, one decision", d)
	}
	f, err := os.Open(decisions)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []map[string]any
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("decisions file line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 1 || lines[0]["rules"] != backtest.Candidate || lines[0]["subject"] != "192.0.2.77" || lines[0]["window"] != "1m" {
		t.Fatalf("decisions file: %v", lines)
	}

	// --exit-code: 3 when the candidate denies a subject the baseline did
	// not, 0 when nobody is newly denied.
	exitStatus := func(err error) int {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			return -1
		}
		return 0
	}
	if _, stderr, err := run("--rules", cand, "--baseline", base, "--from", "2h", "--exit-code"); exitStatus(err) != exitFound ||
		!strings.Contains(stderr, "1 subjects and rules newly denied") {
		t.Fatalf("backtest --exit-code with a new deny: %v, stderr %q; want exit %d", err, stderr, exitFound)
	}
	if _, stderr, err := run("--rules", base, "--from", "2h", "--exit-code"); err != nil {
		t.Fatalf("backtest --exit-code denying nobody: %v, stderr %q; want exit 0", err, stderr)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rules", cand, "--from", "yesterday"}, `--from: time "yesterday"`},
		{[]string{"--rules", cand, "--from", "1h", "--to", "2h"}, "empty range"},
		{[]string{"--rules", filepath.Join(dir, "missing.yaml"), "--from", "1h"}, "missing.yaml"},
		{[]string{"--rules", cand, "--from", "1h", "--json", "--csv"}, "--json and --csv can't be used together"},
	} {
		_, stderr, err := run(c.args...)
		if err == nil || !strings.Contains(stderr, c.want) {
			t.Fatalf("backtest %v: %v, stderr %q; want an error saying %q", c.args, err, stderr, c.want)
		}
	}
}
