package kafkaconn_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"floodgate/kafkaconn"
)

func TestMechanism(t *testing.T) {
	for name, want := range map[string]string{"": "", "none": "", "plain": "PLAIN", "SCRAM-SHA-256": "SCRAM-SHA-256", "scram-sha-512": "SCRAM-SHA-512"} {
		m, err := kafkaconn.Mechanism(name, "u", "p")
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if got := ""; m != nil {
			got = m.Name()
			if got != want {
				t.Errorf("%q: %s, want %s", name, got, want)
			}
		} else if want != "" {
			t.Errorf("%q: no mechanism, want %s", name, want)
		}
	}
	if _, err := kafkaconn.Mechanism("gssapi", "u", "p"); err == nil {
		t.Error("gssapi accepted")
	}
}

// A listener that hangs up on every connection, as a TLS or SASL listener
// does to a plaintext client: Check fails at once, naming the broker and
// the likely cause, and says it was refused.
func TestCheckExplainsAHangUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	err = kafkaconn.Security{}.Check(context.Background(), []string{ln.Addr().String()}, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "kafka "+ln.Addr().String()) || !strings.Contains(err.Error(), "is it a TLS or SASL listener") {
		t.Fatalf("Check: %v", err)
	}
	if errors.Is(err, kafkaconn.ErrRefused) {
		t.Error("a hang-up without TLS is not known to be a refusal")
	}
}
