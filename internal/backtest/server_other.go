//go:build !linux

package backtest

import "os/exec"

// dieWithParent: only Linux can tie the server's life to its parent's;
// elsewhere a killed backtest leaves it running.
func dieWithParent(cmd *exec.Cmd) {}
