package kafkaconn_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/kafkaconn"
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

// SASL PLAIN sends the password as it is: without TLS it is refused unless
// --kafka-sasl-plain-insecure says so; over TLS, and SCRAM either way, it
// is accepted.
func TestPlainNeedsTLS(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    kafkaconn.Flags
		ok   bool
	}{
		{"plain", kafkaconn.Flags{KafkaSASLMechanism: "plain"}, false},
		{"PLAIN", kafkaconn.Flags{KafkaSASLMechanism: "PLAIN"}, false},
		{"plain over TLS", kafkaconn.Flags{KafkaSASLMechanism: "plain", KafkaTLS: true}, true},
		{"plain insecure", kafkaconn.Flags{KafkaSASLMechanism: "plain", KafkaSASLPlainInsecure: true}, true},
		{"scram", kafkaconn.Flags{KafkaSASLMechanism: "scram-sha-512"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.KafkaSASLUsername, tc.f.KafkaSASLPassword = "floodgate", "s3cr3t"
			sec, err := tc.f.KafkaSecurity()
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && (!errors.Is(err, kafkaconn.ErrPlainInClear) || !strings.Contains(err.Error(), "--kafka-tls") || sec.SASL != nil) {
				t.Fatalf("got %v (mechanism %v); want ErrPlainInClear naming --kafka-tls", err, sec.SASL)
			}
		})
	}
}
