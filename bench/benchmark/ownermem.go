package benchmark

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
)

// OwnerMemory is what bench/cmd/ownermem reports of a write-back owner's
// memory: one partition, one event each for Subjects distinct subjects.
type OwnerMemory struct {
	Subjects, Resident, Copies int
	// Per resident subject, bytes: Go heap, mapped outside it, RSS after
	// the heap's free pages are returned, and peak RSS (VmHWM).
	Heap, OffHeap, RSS, Peak float64
	Cmd                      string
}

var (
	ownerResident = regexp.MustCompile(`resident \(headroom entries\) (\d+), bucket copies (\d+)`)
	ownerPer      = regexp.MustCompile(`per resident subject: heap (\d+) B, outside the heap (\d+) B, RSS (\d+) B \(peak (\d+) B\)`)
)

// ownerMemory runs bench/cmd/ownermem in a process of its own (RSS is the
// process's) against the bench's Redis.
func (b *bench) ownerMemory(ctx context.Context) error {
	bin := filepath.Join(b.cfg.WorkDir, "ownermem")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./bench/cmd/ownermem")
	build.Dir = b.cfg.Repo
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build ownermem: %w: %s", err, out)
	}
	n := b.cfg.OwnerSubjects
	args := []string{"-n", strconv.Itoa(n), "-redis-addr", b.cfg.RedisAddr}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ownermem: %w: %s", err, out)
	}
	res, per := ownerResident.FindSubmatch(out), ownerPer.FindSubmatch(out)
	if res == nil || per == nil {
		return fmt.Errorf("ownermem: unexpected output: %s", out)
	}
	m := OwnerMemory{Subjects: n, Cmd: "go run ./bench/cmd/ownermem -n " + strconv.Itoa(n)}
	m.Resident, _ = strconv.Atoi(string(res[1]))
	m.Copies, _ = strconv.Atoi(string(res[2]))
	for i, f := range []*float64{&m.Heap, &m.OffHeap, &m.RSS, &m.Peak} {
		*f, _ = strconv.ParseFloat(string(per[i+1]), 64)
	}
	b.res.Owner = &m
	return nil
}
