package attack

import (
	"fmt"
	"strings"
	"time"

	"floodgate/bench/harness"
)

// FormatRow is the one-line console form of a row.
func FormatRow(r Row) string {
	status := "PASS"
	if !r.Pass {
		status = "FAIL"
	}
	return fmt.Sprintf("attack %s %-18s %s", status, r.Scenario, r.Held)
}

// WriteDoc rewrites the "attack" block of path (docs/faults.md) with the
// rows' table.
func WriteDoc(path string, rows []Row) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s by `make attack` (bench/attack).\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	b.WriteString("| attack | what was tried | what held | result |\n|---|---|---|---|\n")
	for _, r := range rows {
		result := "**pass**"
		if !r.Pass {
			result = "**FAIL**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Scenario, cell(r.Tried), cell(r.Held), result)
	}
	return harness.ReplaceBlock(path, "attack", "Faults", b.String())
}

func cell(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ") }
