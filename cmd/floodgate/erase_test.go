package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

const eraseRules = `rules:
  - name: login-failed
    action: login_failed
    kinds: [ip, email]
    limits: [5/1m]
kinds:
  email: {history: hash}
`

// A kind stored hashed without a key is a start-up error of the history
// writer (and of erase), never a silent raw write.
func TestHistoryHashNeedsKey(t *testing.T) {
	set, err := rules.Parse([]byte(eraseRules))
	if err != nil {
		t.Fatal(err)
	}
	src := &history.PrivacySource{Rules: func() *rules.Set { return set }}
	if _, err := src.Get(); err == nil || !strings.Contains(err.Error(), "email") || !strings.Contains(err.Error(), "--history-key-file") {
		t.Fatalf("history policy with email hashed and no key: err %v", err)
	}
	code, _, errOut := runCLI(t, "erase", "--kind", "email", "--subject", "a@x", "--rules", writeFile(t, "rules.yaml", eraseRules), "--operator", "t")
	if code != exitFailed || !strings.Contains(errOut, "--history-key-file") {
		t.Fatalf("erase of a hashed kind without the key: exit %d: %s", code, errOut)
	}
}

// erase removes a subject from every history table (stored hashed, found
// with the key) and from the live state (counters, deny record), reports
// it as JSON, leaves other subjects alone, and reports 0 when run again.
// The query commands find the hashed subject by its value with the key.
func TestEraseHistoryAndLive(t *testing.T) {
	pool := historytest.Pool(t)
	rdb := stacktest.Redis(t)
	prefix := stacktest.Prefix(t, rdb)
	brokers := stacktest.Brokers(t)
	topic := stacktest.Topic(t, brokers, 2)
	ctx := context.Background()
	rulesFile := writeFile(t, "rules.yaml", eraseRules)
	keyFile := writeFile(t, "history.key", "0123456789abcdef0123456789abcdef\n")
	set, err := rules.Load(rulesFile)
	if err != nil {
		t.Fatal(err)
	}

	// History, as the aggregator writes it with the rules' policy.
	sink := historySink(t, pool, set, keyFile, "test-erase-history")
	now := time.Now().UTC()
	t0 := now.Truncate(time.Minute).Add(-10 * time.Minute)
	var recs []consume.Record
	for i, r := range []struct {
		kind, subject string
		ts            time.Time
	}{
		{"email", "a@x", t0}, {"email", "a@x", t0.Add(time.Minute)}, {"email", "b@x", t0}, {"ip", "192.0.2.9", t0},
	} {
		recs = append(recs, consume.Record{Offset: int64(i), Event: event.Event{V: 1, ID: event.NewID(), Action: "login_failed", Kind: r.kind, Subject: r.subject, TS: r.ts, N: 1}})
	}
	if err := sink.Apply(ctx, consume.Batch{Topic: topic, Partition: 0, First: 0, Last: int64(len(recs) - 1), Records: recs}); err != nil {
		t.Fatal(err)
	}
	var raw int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM floodgate.bucket_1m WHERE subject IN ('a@x', 'b@x')`).Scan(&raw); err != nil || raw != 0 {
		t.Fatalf("%d raw e-mail rows (%v), want them hashed", raw, err)
	}

	// Live state: a@x over its limit (counters and a deny record).
	store, err := window.NewStore(rdb, window.StoreConfig{Prefix: prefix, Partitions: func() int { return 2 }})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := live.NewApplier(store, live.ApplierConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sub := window.Subject{Action: "login_failed", Kind: "email", Subject: "a@x"}
	p := window.Partition(sub, 2)
	b := consume.Batch{Topic: topic, Partition: p}
	for i := range 7 {
		b.Records = append(b.Records, consume.Record{Offset: int64(i), Event: event.Event{V: 1, ID: event.NewID(), Action: "login_failed", Kind: "email", Subject: "a@x", TS: now, N: 1}})
	}
	b.Last = int64(len(b.Records) - 1)
	if _, err := ap.Apply(ctx, "floodgate-live", b, set, now, nil); err != nil {
		t.Fatal(err)
	}
	if recs, err := store.Records(ctx, now, sub); err != nil || recs.Deny == nil {
		t.Fatalf("a@x before erase: records %+v, %v; want a deny record", recs, err)
	}

	t.Setenv("FLOODGATE_POSTGRES_URL", pool.Config().ConnString())
	common := []string{"--rules", rulesFile, "--history-key-file", keyFile}
	count := func(subject string) string {
		t.Helper()
		code, out, errOut := runCLI(t, "query", "count", "--action", "login_failed", "--kind", "email", "--subject", subject,
			"--from", t0.Add(-time.Hour).Format(time.RFC3339), "--to", now.Add(time.Hour).Format(time.RFC3339), "--history-key-file", keyFile)
		if code != 0 {
			t.Fatalf("query count: exit %d: %s", code, errOut)
		}
		n, _, _ := strings.Cut(out, "\t")
		return n
	}
	if n := count("a@x"); n != "2" {
		t.Errorf("query count of a@x (stored hashed) with the key: %s, want 2", n)
	}
	erase := func() operator.EraseReport {
		t.Helper()
		code, out, errOut := runCLI(t, append([]string{"erase", "--kind", "email", "--subject", "a@x", "--key-prefix", prefix, "--topic", topic,
			"--operator", "privacy-test", "--json"}, common...)...)
		if code != 0 {
			t.Fatalf("erase: exit %d: %s%s", code, out, errOut)
		}
		// The log names the erased subject by its keyed hash, never as given.
		if strings.Contains(errOut, "a@x") || !strings.Contains(errOut, "operator action") || !strings.Contains(errOut, "~h:") {
			t.Errorf("erase's log: %s; want the reset's line with the subject's ~h: hash, not a@x", errOut)
		}
		var rep operator.EraseReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("erase --json: %v: %q", err, out)
		}
		return rep
	}
	rep := erase()
	rows := map[string]int64{}
	for _, e := range rep.History {
		rows[e.Table] = e.Rows
	}
	if rows["bucket_1m"] != 2 || rows["history_totals"] != 1 || rep.HistoryRows != 3 {
		t.Errorf("erase history: %+v, want 2 minute rows and 1 total", rep.History)
	}
	if len(rep.Live) != 1 || rep.Live[0].Action != "login_failed" || rep.Live[0].DeletedKeys == 0 || !strings.Contains(strings.Join(rep.Live[0].Cleared, ","), "deny") {
		t.Errorf("erase live: %+v, want login_failed's counters deleted and its deny record cleared", rep.Live)
	}
	if recs, err := store.Records(ctx, now, sub); err != nil || recs.Deny != nil {
		t.Errorf("a@x after erase: records %+v, %v; want none", recs, err)
	}
	if n := count("a@x"); n != "0" {
		t.Errorf("query count of a@x after erase: %s, want 0", n)
	}
	if n := count("b@x"); n != "1" {
		t.Errorf("query count of b@x after erasing a@x: %s, want 1", n)
	}
	again := erase()
	if again.HistoryRows != 0 || again.LiveKeys != 0 {
		t.Errorf("second erase: %d history rows, %d live keys; want 0 and 0 (%+v)", again.HistoryRows, again.LiveKeys, again)
	}
	code, out, errOut := runCLI(t, append([]string{"erase", "--kind", "email", "--subject", "a@x", "--key-prefix", prefix, "--topic", topic,
		"--operator", "privacy-test"}, common...)...)
	if code != 0 || !strings.Contains(out, "history: 0 rows") || !strings.Contains(out, "not erased:") {
		t.Errorf("erase as text: exit %d: %s%s", code, out, errOut)
	}
	t.Logf("erase, run again:\n%s", out)
}

// historySink is a history sink writing as the aggregator does: subjects
// normalized and stored as set's kinds: block says, hashed with the key in
// keyFile ("": none).
func historySink(t *testing.T, pool *pgxpool.Pool, set *rules.Set, keyFile, group string) *history.Sink {
	t.Helper()
	hasher, err := history.KeyFlags{HistoryKeyFile: keyFile}.Hasher()
	if err != nil {
		t.Fatal(err)
	}
	ladder, err := history.ParseLadder(history.DefaultLadder)
	if err != nil {
		t.Fatal(err)
	}
	src := &history.PrivacySource{Rules: func() *rules.Set { return set }, Hasher: hasher}
	sink, err := history.NewSink(context.Background(), history.SinkConfig{
		DB: pool, Group: group, Ladder: ladder, Privacy: src.Get,
		Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return sink
}
