package faults

import (
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
