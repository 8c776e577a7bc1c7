package deploy_test

import (
	"os/exec"
	"testing"

	"floodgate/stacktest"
)

const (
	alertsFile     = "prometheus/floodgate-alerts.yaml"
	alertsTestFile = "prometheus/floodgate-alerts_test.yaml"
)

// TestAlertRules checks the alert rules with promtool and runs their unit
// tests (each alert fires on its condition, after its for:, with its
// labels and annotations, and stays quiet otherwise).
func TestAlertRules(t *testing.T) {
	bin := stacktest.Promtool(t)
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
