package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The floodgate binary the deployments run, built once for the tests that
// parse their command lines with it.
var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// floodgateBinary builds ../cmd/floodgate once per test run.
func floodgateBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "floodgate-deploy-test")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "floodgate")
		if out, err := exec.Command("go", "build", "-o", binPath, "../cmd/floodgate").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("build floodgate: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}
