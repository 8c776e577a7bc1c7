package backtest

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the server when the backtest dies
// without closing it (SIGKILL, a crash): it must never outlive its replay.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
