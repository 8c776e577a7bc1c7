package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/event"
	"github.com/floodgate-dev/floodgate/internal/consume"
	"github.com/floodgate-dev/floodgate/internal/history"
	"github.com/floodgate-dev/floodgate/internal/history/historytest"
)

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			RawSQL string `json:"rawSql"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// TestDashboardQueriesRun runs the SQL of every panel and variable of the
// provisioned Grafana dashboard, its macros replaced as Grafana would, on
// a database of the test's own, migrated, holding a few visits, as
// floodgate_reader (the role Grafana's login is a member of): a renamed
// SQL function, a wrong argument or a missing grant breaks this test, not
// the dashboard.
func TestDashboardQueriesRun(t *testing.T) {
	raw, err := os.ReadFile("grafana/dashboards/floodgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	pool := historytest.Pool(t)
	ctx := context.Background()
	day := time.Date(2030, 5, 6, 0, 0, 0, 0, time.UTC)
	sink, err := history.NewSink(ctx, history.SinkConfig{DB: pool, Group: "dashboard-test",
		Visitors: history.Visitors{"visit": "ip"}})
	if err != nil {
		t.Fatal(err)
	}
	b := consume.Batch{Topic: "t", First: 0, Last: 29}
	for i := range 30 {
		b.Records = append(b.Records, consume.Record{Offset: int64(i), Event: event.Event{V: 1, ID: event.NewID(),
			Action: "visit", Kind: "link", Subject: fmt.Sprintf("l%d", i%3), TS: day.Add(time.Duration(i) * time.Hour / 2), N: 1,
			Attrs: map[string]string{"ip": fmt.Sprintf("192.0.2.%d", i%7)}}})
	}
	if err := sink.Apply(ctx, b); err != nil {
		t.Fatal(err)
	}

	// Grafana logs in as a member of floodgate_reader: every query runs
	// with that role's rights.
	reader := historytest.ReaderPool(t, pool)
	macros := strings.NewReplacer(
		"$__timeFrom()", "'"+day.Format(time.RFC3339)+"'::timestamptz",
		"$__timeTo()", "'"+day.Add(24*time.Hour).Format(time.RFC3339)+"'::timestamptz",
		"$__interval_ms", "3600000",
		"${action}", "visit", "${subject}", "", "${kind}", "",
	)
	run := func(what, sql string) {
		t.Helper()
		sql = macros.Replace(sql)
		rows, err := reader.Query(ctx, sql)
		if err != nil {
			t.Errorf("%s: %v\n%s", what, err, sql)
			return
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil {
			t.Errorf("%s: %v\n%s", what, err, sql)
		}
		if n == 0 {
			t.Errorf("%s: no rows\n%s", what, sql)
		}
	}
	queries := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			run("panel "+p.Title, tg.RawSQL)
			queries++
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			run("variable "+v.Name, q)
			queries++
		}
	}
	if queries < 10 {
		t.Fatalf("ran %d queries; the dashboard has more", queries)
	}
}
