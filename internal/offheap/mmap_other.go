//go:build !unix

package offheap

func mapBytes(n int) ([]byte, error) { return make([]byte, n), nil }

func unmapBytes([]byte) error { return nil }
