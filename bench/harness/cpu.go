package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, 100 on
// every Linux the stack runs on (it is part of the kernel's ABI).
const userHZ = 100

// ProcCPU returns the CPU time, user and system, that process pid has used
// so far (/proc/PID/stat).
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces and parentheses: count
	// fields from after its last ')'. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	var f []string
	if i >= 0 {
		f = strings.Fields(string(b[i+1:]))
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu of pid %d: unexpected /proc/%d/stat", pid, pid)
	}
	utime, uerr := strconv.ParseInt(f[11], 10, 64)
	stime, serr := strconv.ParseInt(f[12], 10, 64)
	if uerr != nil || serr != nil {
		return 0, fmt.Errorf("cpu of pid %d: utime %q, stime %q", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// PidFile reads the process id a pid file holds (scripts/stack writes one
// per service).
func PidFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("pid file %s: %w", path, err)
	}
	return pid, nil
}

// SelfStatusKiB returns a field of this process's /proc/self/status in KiB
// (VmRSS, VmHWM...; 0 when unknown): the in-process memory benchmarks read
// their own footprint with it.
func SelfStatusKiB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}
