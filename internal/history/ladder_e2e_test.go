package history_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/producer"
)

// buildBinary builds cmd/floodgate once per test.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "floodgate")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/floodgate-dev/floodgate/cmd/floodgate").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestEndToEndLadder produces ten simulated days of events through Kafka,
// consumes them with the history group, rolls with `floodgate roller once
// --now`, and checks the ladder and every count against what was produced.
func TestEndToEndLadder(t *testing.T) {
	pool := historytest.Pool(t)
	brokers := stacktest.Brokers(t)
	topic := stacktest.Topic(t, brokers, 4)
	group := "fgtest-history-e2e-" + topic
	bin := buildBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const ladder = "1m:1d,5m:3d,1h:7d,1d:forever"
	l, _ := history.ParseLadder(ladder)
	now := time.Now().UTC().Truncate(time.Minute)
	r := rand.New(rand.NewPCG(11, 11))
	evs := make([]event.Event, 20000)
	for i := range evs {
		evs[i] = event.Event{ID: event.NewID(), Action: []string{"visit", "login_failed"}[r.IntN(2)], Kind: "ip",
			Subject: "10.0.0." + strconv.Itoa(r.IntN(30)), TS: now.Add(-time.Duration(r.Int64N(int64(10 * 24 * time.Hour)))).Truncate(time.Millisecond), N: 1,
			Attrs: map[string]string{"ip": "192.0.2." + strconv.Itoa(r.IntN(200))}}
	}
	p, err := producer.New(producer.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	prod := newProduced()
	for _, e := range evs {
		k := e.Action + "|" + e.Kind + "|" + e.Subject
		prod.perKey[k]++
		prod.total.Add(1)
		if e.Action == "visit" {
			if prod.visitors[k] == nil {
				prod.visitors[k] = map[string]bool{}
			}
			prod.visitors[k][e.Attrs["ip"]] = true
		}
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	s, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: group, Ladder: l, Logger: logger, Visitors: testVisitors})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- runGroup(ctx, s, brokers, topic, group, logger) }()
	waitTotals(t, pool, brokers, topic, group, prod, 60*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	floodgate := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "FLOODGATE_POSTGRES_URL="+pool.Config().ConnString(), "FLOODGATE_LADDER="+ladder)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("floodgate %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := floodgate("roller", "once", "--now", now.Format(time.RFC3339))
	t.Logf("roller once:\n%s", out)
	first := digest(t, pool)
	if out := floodgate("roller", "once", "--now", now.Format(time.RFC3339)); digest(t, pool) != first {
		t.Fatalf("a second roller run changed history:\n%s", out)
	}

	// The ladder: each tier holds exactly its own range, aligned.
	upper := now.Add(time.Hour)
	for i, tier := range l {
		var lower time.Time
		if i+1 < len(l) {
			lower = history.Bin(now.Add(-tier.Horizon), l[i+1].Width)
		}
		var bad, rows int64
		err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE bucket < $1 OR bucket >= $2 OR date_bin($3, bucket, timestamptz '2000-01-03 00:00:00+00') <> bucket), count(*) FROM `+
			pgx.Identifier{"floodgate", tier.Table()}.Sanitize(), lower, upper, tier.Width).Scan(&bad, &rows)
		if err != nil {
			t.Fatal(err)
		}
		if bad != 0 || rows == 0 {
			t.Errorf("tier %s: %d rows, %d outside [%s, %s) or unaligned", tier.Name, rows, bad, lower, upper)
		}
		upper = lower
	}

	// Counts and curves equal what was produced.
	q := history.NewQuerier(pool)
	count := func(action, subject string, from, to time.Time) int64 {
		var n int64
		for _, e := range evs {
			if e.Action == action && (subject == "" || e.Subject == subject) && !e.TS.Before(from) && e.TS.Before(to) {
				n++
			}
		}
		return n
	}
	dayStart := history.Bin(now.Add(-11*24*time.Hour), 24*time.Hour)
	for _, action := range []string{"visit", "login_failed"} {
		for _, subject := range []string{"", "10.0.0.3", "10.0.0.17"} {
			k := history.Key{Action: action, Subject: subject}
			curve, err := q.Curve(ctx2(), k, dayStart, now.Add(time.Minute), 24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			for _, pt := range curve {
				if want := count(action, subject, pt.Time, pt.Time.Add(24*time.Hour)); pt.Value != want {
					t.Errorf("%v on %s = %d, produced %d", k, pt.Time.Format(time.DateOnly), pt.Value, want)
				}
			}
			from := history.Bin(now.Add(-24*time.Hour), 5*time.Minute)
			curve, err = q.Curve(ctx2(), k, from, now.Add(time.Minute), 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, pt := range curve {
				if want := count(action, subject, pt.Time, pt.Time.Add(5*time.Minute)); pt.Value != want {
					t.Errorf("%v at %s = %d, produced %d", k, pt.Time.Format(time.RFC3339), pt.Value, want)
				}
			}
			if got, err := q.Total(ctx2(), k); err != nil || got != count(action, subject, time.Time{}, now.Add(time.Hour)) {
				t.Errorf("%v total = %d, %v", k, got, err)
			}
		}
	}

	// The terminal answers.
	if out := floodgate("query", "total", "--action", "visit"); !strings.HasPrefix(out, strconv.FormatInt(count("visit", "", time.Time{}, now.Add(time.Hour)), 10)+"\t") {
		t.Errorf("query total:\n%s", out)
	}
	// Unique visitors: per day and over the ten days, from the rolled
	// tiers (200 ips: exact).
	visitors := func(subject string, from, to time.Time) int64 {
		seen := map[string]bool{}
		for _, e := range evs {
			if e.Action == "visit" && e.Subject == subject && !e.TS.Before(from) && e.TS.Before(to) {
				seen[e.Attrs["ip"]] = true
			}
		}
		return int64(len(seen))
	}
	out = floodgate("query", "visitors", "-a", "visit", "-s", "10.0.0.3", "--from", dayStart.Format(time.RFC3339),
		"--to", now.Add(time.Minute).Format(time.RFC3339), "--step", "1d", "--now", now.Format(time.RFC3339))
	for day := dayStart; day.Before(now); day = day.Add(24 * time.Hour) {
		line := fmt.Sprintf("%s  %d  %d", day.Format(time.DateOnly), count("visit", "10.0.0.3", day, day.Add(24*time.Hour)), visitors("10.0.0.3", day, day.Add(24*time.Hour)))
		if !strings.Contains(strings.Join(strings.Fields(out), "  "), line) {
			t.Errorf("query visitors lacks %q:\n%s", line, out)
		}
	}
	if want := fmt.Sprintf("%d\tunique visitors in range", visitors("10.0.0.3", dayStart, now.Add(time.Minute))); !strings.Contains(out, want) {
		t.Errorf("query visitors lacks %q:\n%s", want, out)
	}
	t.Logf("query visitors:\n%s", out)
	if out := floodgate("query", "top", "-a", "visit", "--visitors", "--ever"); !strings.Contains(out, "top 10 visit by unique visitors, all time") || !strings.Contains(out, "visitors") {
		t.Errorf("query top --visitors:\n%s", out)
	}
	dash := floodgate("query", "summary", "--action", "visit", "--now", now.Format(time.RFC3339))
	for _, want := range []string{"TOTALS", "LAST 24 HOURS", "TOP SUBJECTS", "ip:10.0.0.", "UNIQUE VISITORS", "TOP SUBJECTS BY UNIQUE VISITORS"} {
		if !strings.Contains(dash, want) {
			t.Errorf("dashboard lacks %q:\n%s", want, dash)
		}
	}
	t.Logf("dashboard:\n%s", dash)
}

func ctx2() context.Context { return context.Background() }

func digest(t *testing.T, db history.DB) string {
	t.Helper()
	var d string
	err := db.QueryRow(context.Background(), `SELECT coalesce(md5(string_agg(format('%s|%s|%s|%s|%s|%s', step, action, subject, kind, bucket, n), ',' ORDER BY step, action, subject, kind, bucket)), 'empty') FROM `+
		pgx.Identifier{"floodgate", "buckets"}.Sanitize()).Scan(&d)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
