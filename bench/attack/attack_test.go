package attack

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// TestAttacksHold runs every attack of make attack against the stack, the
// memory attack with 20,000 subjects instead of a million (make attack runs
// the million and reports its figures).
func TestAttacksHold(t *testing.T) {
	brokers := stacktest.Brokers(t)
	rdb := stacktest.Redis(t)
	pg := historytest.Pool(t).Config().ConnString()
	bin := filepath.Join(t.TempDir(), "floodgate")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/floodgate-dev/floodgate/cmd/floodgate").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rows, err := Run(context.Background(), Config{
		Bin: bin, Brokers: brokers, RedisAddr: rdb.Options().Addr, PostgresURL: pg,
		WorkDir: t.TempDir(), Subjects: 20_000,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(scenarios) {
		t.Fatalf("%d rows, want %d", len(rows), len(scenarios))
	}
	for _, r := range rows {
		if !r.Pass {
			t.Errorf("%s: tried %s; held: %s", r.Scenario, r.Tried, r.Held)
		} else {
			t.Logf("%s: %s", r.Scenario, r.Held)
		}
	}
}
