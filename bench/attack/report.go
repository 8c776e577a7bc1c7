package attack

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/bench/harness"
)

// FormatRow is the one-line console form of a row.
func FormatRow(r Row) string {
	status := "PASS"
	if !r.Pass {
		status = "FAIL"
	}
	return fmt.Sprintf("attack %s %-18s %s", status, r.Scenario, r.Held)
}

// block is the name of the attack block in docs/faults.md (bench/faults
// keeps it when make chaos rewrites the file).
const block = "attack"

// WriteDoc rewrites the attack block of path (docs/faults.md): the rows
// run now, the earlier lines of the scenarios not run (--only), then every
// hostile input handled and the test that holds it.
func WriteDoc(path string, rows []Row) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	byName := map[string]string{}
	for _, r := range rows {
		result := "**pass**"
		if !r.Pass {
			result = "**FAIL**"
		}
		byName[r.Scenario] = fmt.Sprintf("| %s | %s | %s | %s | %s |", r.Scenario, cell(r.Tried), cell(r.Held), result,
			time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	}
	var b strings.Builder
	b.WriteString("`make attack` runs the real `floodgate limiter` and `floodgate aggregator` binaries on the local stack and\n")
	b.WriteString("does what a hostile client would (bench/attack). A row fails when anything over a limit got through,\n")
	b.WriteString("a partition stayed stuck, or a process's memory passed its documented bound (the limiter's under\n")
	b.WriteString("million-subjects, the aggregator's under fetch-of-bombs). `make test` runs the same attacks (TestAttacksHold),\n")
	b.WriteString("the memory one with 20,000 subjects. Elsewhere the aggregator's peak RSS is reported, not bounded: at a million\n")
	b.WriteString("resident subjects it holds about 1 KB each (its copies and headroom per subject), which the live path's\n")
	b.WriteString("write-back step sets out to bring under 150 bytes.\n\n")
	b.WriteString("| attack | what was tried | what held | result | measured |\n|---|---|---|---|---|\n")
	for _, sc := range scenarios {
		line, ok := byName[sc.name]
		if !ok {
			line = oldLine(string(old), sc.name)
		}
		if line != "" {
			b.WriteString(line + "\n")
		}
	}
	b.WriteString("\n" + inputs)
	return harness.ReplaceBlock(path, block, "Faults", b.String())
}

// oldLine is scenario's table line in doc's attack block, or "".
func oldLine(doc, scenario string) string {
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "| "+scenario+" |") {
			return l
		}
	}
	return ""
}

func cell(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ") }
