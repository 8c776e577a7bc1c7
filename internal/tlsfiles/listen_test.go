package tlsfiles

import "testing"

func TestBeyondLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": false, "[::1]:8080": false, "localhost:8080": false,
		":8080": true, "0.0.0.0:8080": true, "10.0.0.5:8080": true,
	} {
		if got := BeyondLoopback(addr); got != want {
			t.Errorf("BeyondLoopback(%q) = %v", addr, got)
		}
	}
}
