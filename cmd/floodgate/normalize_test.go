package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/live"
	"github.com/floodgate-dev/floodgate/internal/operator"
	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// Issue 51: the history writer stores an e-mail as the live path counts
// it (trimmed, lowercased), query finds it by any spelling, and erase of
// any spelling removes the subject counted from history and live state.
func TestEraseAndQueryNormalizeTheSubject(t *testing.T) {
	pool := historytest.Pool(t)
	rdb := stacktest.Redis(t)
	prefix := stacktest.Prefix(t, rdb)
	brokers := stacktest.Brokers(t)
	topic := stacktest.Topic(t, brokers, 2)
	ctx := context.Background()
	rulesFile := writeFile(t, "rules.yaml", "rules:\n  - name: login-failed\n    action: login_failed\n    kinds: [email]\n    limits: [5/1m]\n")
	set, err := rules.Load(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	sink := historySink(t, pool, set, "", "test-normalize-history")
	now := time.Now().UTC()
	t0 := now.Truncate(time.Minute).Add(-10 * time.Minute)
	var recs []consume.Record
	for i, s := range []string{"Victim@x.example", " VICTIM@x.example", "other@x.example"} {
		recs = append(recs, consume.Record{Offset: int64(i), Event: event.Event{V: 1, ID: event.NewID(), Action: "login_failed", Kind: "email", Subject: s, TS: t0, N: 1}})
	}
	if err := sink.Apply(ctx, consume.Batch{Topic: topic, Partition: 0, First: 0, Last: int64(len(recs) - 1), Records: recs}); err != nil {
		t.Fatal(err)
	}

	store, err := window.NewStore(rdb, window.StoreConfig{Prefix: prefix, Partitions: func() int { return 2 }})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := live.NewApplier(store, live.ApplierConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sub := window.Subject{Action: "login_failed", Kind: "email", Subject: "victim@x.example"}
	b := consume.Batch{Topic: topic, Partition: window.Partition(sub, 2)}
	for i := range 7 {
		b.Records = append(b.Records, consume.Record{Offset: int64(i), Event: event.Event{V: 1, ID: event.NewID(), Action: "login_failed", Kind: "email", Subject: "Victim@X.example", TS: now, N: 1}})
	}
	b.Last = int64(len(b.Records) - 1)
	if _, err := ap.Apply(ctx, "floodgate-live", b, set, now, nil); err != nil {
		t.Fatal(err)
	}
	if recs, err := store.Records(ctx, now, sub); err != nil || recs.Deny == nil {
		t.Fatalf("victim@x.example before erase: records %+v, %v; want a deny record", recs, err)
	}

	t.Setenv("FLOODGATE_POSTGRES_URL", pool.Config().ConnString())
	count := func(subject string) string {
		t.Helper()
		code, out, errOut := runCLI(t, "query", "count", "--action", "login_failed", "--kind", "email", "--subject", subject, "--rules", rulesFile,
			"--from", t0.Add(-time.Hour).Format(time.RFC3339), "--to", now.Add(time.Hour).Format(time.RFC3339))
		if code != 0 {
			t.Fatalf("query count: exit %d: %s", code, errOut)
		}
		n, _, _ := strings.Cut(out, "\t")
		return n
	}
	for _, s := range []string{"victim@x.example", "VICTIM@X.EXAMPLE "} {
		if n := count(s); n != "2" {
			t.Errorf("query count of %q: %s, want 2 (two spellings written, one subject)", s, n)
		}
	}
	code, out, errOut := runCLI(t, "erase", "--kind", "email", "--subject", "VICTIM@X.Example", "--key-prefix", prefix, "--topic", topic,
		"--operator", "privacy-test", "--json", "--rules", rulesFile)
	if code != 0 {
		t.Fatalf("erase: exit %d: %s%s", code, out, errOut)
	}
	var rep operator.EraseReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("erase --json: %v: %q", err, out)
	}
	if rep.Normalized != "victim@x.example" || rep.HistoryRows == 0 || len(rep.Live) != 1 || rep.Live[0].DeletedKeys == 0 {
		t.Errorf("erase of another spelling: %+v, want victim@x.example's history rows and live keys", rep)
	}
	if recs, err := store.Records(ctx, now, sub); err != nil || recs.Deny != nil {
		t.Errorf("victim@x.example after erase: records %+v, %v; want none", recs, err)
	}
	if n := count("victim@x.example"); n != "0" {
		t.Errorf("query count after erase: %s, want 0", n)
	}
	if n := count("other@x.example"); n != "1" {
		t.Errorf("query count of another subject after erase: %s, want 1", n)
	}
}
