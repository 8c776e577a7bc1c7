//go:build unix

package offheap

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// mapBytes maps n zeroed bytes of anonymous private memory. The kernel
// backs a page when it is first touched, so what is mapped and never used
// costs no RSS.
func mapBytes(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes: %w", n, err)
	}
	return b, nil
}

func unmapBytes(b []byte) error {
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("unmap %d bytes: %w", len(b), err)
	}
	return nil
}
