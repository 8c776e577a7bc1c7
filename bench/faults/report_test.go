package faults

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A document written before the rows were kept gives its rows back in the
// legacy order, with the reported column added; one written since gives
// back what it holds.
func TestReadDocRows(t *testing.T) {
	dir := t.TempDir()
	legacy := filepath.Join(dir, "legacy.md")
	var b strings.Builder
	b.WriteString("# Faults\n\nMeasured 2026-11-25 23:13 UTC on 2 × CPU, 1 GiB RAM, Linux 6, at commit `abc123`; load average at the end 1.\n\nEach fault is injected alone, under a paced load of 2000 events/s over 300 subjects, into\n\n")
	b.WriteString("| fault | produced (acked) | in topic | Postgres | Redis | dead-lettered | lost PG / Redis | dup PG / Redis | recovery | result |\n|---|\n")
	for _, n := range legacyScenarios {
		b.WriteString("| " + n + " | 1 | 1 | 1 | 1 | 0 | 0 / 0 | 0 / 0 | 1s | **pass** |\n")
	}
	b.WriteString("\n### Notes per fault\n\n")
	for _, n := range legacyScenarios {
		b.WriteString("- **" + n + "** — recovery: x.\n")
	}
	b.WriteString("\n## Redis loses its counters: rebuild from Kafka\n\n- **not a note**\n")
	if err := os.WriteFile(legacy, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	rows := readDocRows(legacy)
	if len(rows) != len(legacyScenarios) {
		t.Fatalf("%d rows, want %d: %v", len(rows), len(legacyScenarios), rows)
	}
	k := rows["kafka"]
	if k.Table != "| kafka | 1 | 1 | 1 | 1 | 0 | 0 / 0 | 0 / 0 | — | 1s | **pass** |" || k.Note != "- **kafka** — recovery: x." || k.Measured != "2026-11-25 23:13 UTC at commit `abc123`, 2000 events/s over 300 subjects" {
		t.Errorf("kafka row %+v", k)
	}

	r := renderRow(Row{Scenario: "retention-gap", Fault: "gap", Produced: 3, InTopic: 2, Postgres: 2, Redis: 2, LostPG: 1, LostRedis: 1,
		Reported: "1 / 1 offsets", Recovery: time.Second, RecoveryNote: "restart", Note: "n", Pass: true}, "now")
	current := filepath.Join(dir, "current.md")
	if err := os.WriteFile(current, []byte("# Faults\n\n"+r.Table+"\n\n"+rowsMarker+`[{"scenario":"retention-gap","table":"`+r.Table+`","note":"`+r.Note+`","measured":"now"}] -->`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := readDocRows(current)
	if len(got) != 1 || got["retention-gap"] != r {
		t.Errorf("rows %+v, want %+v", got, r)
	}
}
