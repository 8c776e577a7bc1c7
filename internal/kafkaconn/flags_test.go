package kafkaconn

import "testing"

func TestKafkaSecurity(t *testing.T) {
	f := Flags{KafkaSASLMechanism: "scram-sha-512", KafkaSASLUsername: "u", KafkaSASLPassword: "p"}
	sec, err := f.KafkaSecurity()
	if err != nil || sec.SASL == nil || sec.SASL.Name() != "SCRAM-SHA-512" || sec.TLS != nil {
		t.Fatalf("scram: %+v, %v", sec, err)
	}
	f = Flags{KafkaSASLMechanism: "plain", KafkaSASLUsername: "u"}
	if _, err := f.KafkaSecurity(); err == nil {
		t.Fatal("plain without a password accepted")
	}
	f = Flags{KafkaTLS: true}
	if sec, err = f.KafkaSecurity(); err != nil || sec.TLS == nil || sec.SASL != nil {
		t.Fatalf("tls: %+v, %v", sec, err)
	}
}
