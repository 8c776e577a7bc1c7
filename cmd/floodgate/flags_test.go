package main

import (
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// --help shows no secret given in the environment.
func TestHelpShowsNoSecrets(t *testing.T) {
	for _, k := range []string{"FLOODGATE_REDIS_PASSWORD", "FLOODGATE_KAFKA_SASL_PASSWORD", "FLOODGATE_AUTH_TOKEN", "FLOODGATE_POSTGRES_URL"} {
		t.Setenv(k, "postgres://u:topsecret-value@h/db")
	}
	for _, cmd := range []string{"limiter serve", "aggregator", "dashboard", "rebuild"} {
		var buf strings.Builder
		var cli CLI
		p, err := kong.New(&cli, kong.Name("floodgate"), kong.Writers(&buf, &buf), kong.Exit(func(int) {}))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = p.Parse(append(strings.Fields(cmd), "--help"))
		if !strings.Contains(buf.String(), "--redis-password-file") && cmd != "dashboard" {
			t.Fatalf("%s --help lacks the secret-file flags:\n%s", cmd, buf.String())
		}
		if strings.Contains(buf.String(), "topsecret") {
			t.Errorf("%s --help shows a secret from the environment", cmd)
		}
	}
}
