package faults

import (
	"os"
	"strings"
	"testing"
	"time"
)

// A block written before the rows were kept gives its rows back, one per
// scenario of its time in order, with the reported column added; one
// written since gives back what it holds.
func TestReadDocRows(t *testing.T) {
	legacy := legacyNames(singleScenarios, 7)
	if len(legacy) != 7 || legacy[6] != "redis" {
		t.Fatalf("legacy single-node scenarios %v", legacy)
	}
	var b strings.Builder
	b.WriteString("Measured 2026-11-25 23:13 UTC on 2 × CPU, 1 GiB RAM, Linux 6, at commit `abc123`; load average at the end 1.\n\n")
	b.WriteString("Each fault is injected alone, under a paced load of 2000 events/s over 300 subjects, into one running\n\n")
	b.WriteString("| fault | produced (acked) | in topic | Postgres | Redis | dead-lettered | lost PG / Redis | dup PG / Redis | recovery | result |\n|---|\n")
	for _, n := range legacy {
		b.WriteString("| " + n + " | 1 | 1 | 1 | 1 | 0 | 0 / 0 | 0 / 0 | 1s | **pass** |\n")
	}
	b.WriteString("\n**Notes per fault**\n\n")
	for _, n := range legacy {
		b.WriteString("- **" + n + "** — recovery: x.\n")
	}
	rows := readDocRows(b.String(), singleScenarios)
	if len(rows) != len(legacy) {
		t.Fatalf("%d rows, want %d: %v", len(rows), len(legacy), rows)
	}
	k := rows["kafka"]
	if k.Table != "| kafka | 1 | 1 | 1 | 1 | 0 | 0 / 0 | 0 / 0 | — | 1s | **pass** |" || k.Note != "- **kafka** — recovery: x." ||
		k.Measured != "2026-11-25 23:13 UTC at commit `abc123`, 2000 events/s over 300 subjects" {
		t.Errorf("kafka row %+v", k)
	}

	r := renderRow(Row{Scenario: "retention-gap", Fault: "gap", Produced: 3, InTopic: 2, Postgres: 2, Redis: 2, LostPG: 1, LostRedis: 1,
		Reported: "1 / 1 offsets", Recovery: time.Second, RecoveryNote: "restart", Note: "n", Pass: true}, "now")
	block := r.Table + "\n\n" + rowsMarker + `[{"scenario":"retention-gap","table":"` + r.Table + `","note":"` + r.Note + `","measured":"now"}] -->` + "\n"
	got := readDocRows(block, singleScenarios)
	if len(got) != 1 || got["retention-gap"] != r {
		t.Errorf("rows %+v, want %+v", got, r)
	}
}

// TestRowsCommentOneRowALine writes rows as the document keeps them and
// reads them back: one JSON row a line (no line grows with the number of
// scenarios), a note holding "-->" not ending the comment.
func TestRowsCommentOneRowALine(t *testing.T) {
	var rows []docRow
	for _, sc := range singleScenarios {
		rows = append(rows, docRow{Scenario: sc.name, Table: "| " + sc.name + " | 1 |", Note: "- **" + sc.name + "** --> <b> & " + strings.Repeat("x", 600), Measured: "now"})
	}
	c := rowsComment(rows)
	lines := strings.Split(strings.TrimSuffix(c, "\n"), "\n")
	if len(lines) != len(rows)+2 {
		t.Fatalf("%d lines for %d rows:\n%s", len(lines), len(rows), c)
	}
	for i, l := range lines {
		if len(l) > 1000 {
			t.Errorf("line %d is %d chars", i+1, len(l))
		}
	}
	got := readDocRows("| table |\n\n"+c, singleScenarios)
	if len(got) != len(rows) {
		t.Fatalf("read back %d rows, want %d", len(got), len(rows))
	}
	for _, r := range rows {
		if got[r.Scenario] != r {
			t.Errorf("row %s: %+v, want %+v", r.Scenario, got[r.Scenario], r)
		}
	}
}

// TestDocumentRowsReadBack reads docs/faults.md as an --only run does:
// each profile's block gives back a row per scenario of its table.
func TestDocumentRowsReadBack(t *testing.T) {
	raw, err := os.ReadFile("../../docs/faults.md")
	if err != nil {
		t.Fatalf("read docs/faults.md: %v", err)
	}
	doc := string(raw)
	for _, p := range []struct {
		name string
		list []scenario
	}{{singleBlock, singleScenarios}, {clusterBlock, clusterScenarios}} {
		b := block(doc, p.name)
		if !strings.Contains(b, rowsMarker+"\n") {
			t.Errorf("block %s: no rows comment in the one-row-a-line format", p.name)
		}
		rows := readDocRows(b, p.list)
		if len(rows) == 0 {
			t.Errorf("block %s: no rows read back", p.name)
		}
		for name, r := range rows {
			if !strings.Contains(b, r.Table+"\n") {
				t.Errorf("block %s: row %s's table line is not in the table", p.name, name)
			}
		}
	}
	for i, l := range strings.Split(doc, "\n") {
		if len(l) > 1000 {
			t.Errorf("docs/faults.md:%d is %d chars", i+1, len(l))
		}
	}
}
