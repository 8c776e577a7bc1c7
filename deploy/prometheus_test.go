package deploy_test

import (
	"os"
	"os/exec"
	"testing"
)

const (
	alertsFile     = "prometheus/floodgate-alerts.yaml"
	alertsTestFile = "prometheus/floodgate-alerts_test.yaml"
)

// promtool finds Debian's promtool (package prometheus, which scripts/stack
// installs): missing, the test fails under CI and skips elsewhere.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("promtool not found (apt-get install prometheus): %v", err)
		}
		t.Skipf("promtool not found (apt-get install prometheus): %v", err)
	}
	return p
}

// TestAlertRules checks the alert rules with promtool and runs their unit
// tests (each alert fires on its condition, after its for:, with its
// labels and annotations, and stays quiet otherwise).
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", alertsFile},
		{"test", "rules", alertsTestFile},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
