package stacktest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// RunNginx runs Debian's nginx as a private process on dir (its prefix,
// holding the nginx.conf the test wrote) until the test ends, and waits
// until it accepts connections on listen. On a failed test its stderr and
// error log are printed.
func RunNginx(tb testing.TB, dir, listen string) {
	tb.Helper()
	cmd := exec.Command(Nginx(tb), "-p", dir, "-c", filepath.Join(dir, "nginx.conf"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start nginx: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); _ = out.Close() }()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT) // graceful shutdown
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if tb.Failed() {
			for _, name := range []string{"stderr.log", "error.log"} {
				b, _ := os.ReadFile(filepath.Join(dir, name))
				tb.Logf("nginx %s:\n%s", name, b)
			}
		}
	})
	WaitFor(tb, "nginx listening on "+listen, 20*time.Second, func() bool {
		select {
		case err := <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "stderr.log"))
			tb.Fatalf("nginx exited: %v\n%s", err, b)
		default:
		}
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
}
