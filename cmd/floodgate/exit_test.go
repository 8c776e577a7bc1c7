package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

// --help documents every exit status.
func TestExitFoundDocumented(t *testing.T) {
	if _, out, _ := runCLI(t, "--help"); !strings.Contains(out, "3 found, with --exit-code") {
		t.Errorf("--help does not document the exit status:\n%s", out)
	}
}

// migrate status --exit-code exits 3 while migrations are pending, 0 once
// none are; without the flag, pending migrations exit 0 as before.
func TestExitCodeMigrate(t *testing.T) {
	dbURL := emptyDatabase(t, stacktest.PostgresURL(t))
	t.Setenv("FLOODGATE_POSTGRES_URL", dbURL)
	if code, out, stderr := runCLI(t, "migrate", "status"); code != 0 || !strings.Contains(out, "pending") {
		t.Fatalf("migrate status: exit %d, want 0 with pending migrations listed:\n%s%s", code, out, stderr)
	}
	code, out, stderr := runCLI(t, "migrate", "status", "--exit-code")
	if code != exitFound || !strings.Contains(out, "pending") || !strings.Contains(stderr, "pending migrations") {
		t.Fatalf("migrate status --exit-code: exit %d, want %d:\n%s%s", code, exitFound, out, stderr)
	}
	if code, _, stderr := runCLI(t, "migrate", "up", "--exit-code"); code != 0 {
		t.Fatalf("migrate up --exit-code: exit %d, want 0 (nothing pending after it): %s", code, stderr)
	}
	if code, out, stderr := runCLI(t, "migrate", "status", "--exit-code", "--json"); code != 0 || strings.Contains(out, `"applied":false`) {
		t.Fatalf("migrate status --exit-code after up: exit %d:\n%s%s", code, out, stderr)
	}
}

// emptyDatabase creates a database of the test's own, without migrations,
// on the server of serverURL, and drops it when the test ends.
func emptyDatabase(t *testing.T, serverURL string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "floodgate_exittest_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// inspect --exit-code exits 3 for a banned subject, 0 for one with no deny
// and no ban.
func TestExitCodeInspect(t *testing.T) {
	brokers := stacktest.Brokers(t)
	rdb := stacktest.Redis(t)
	prefix := stacktest.Prefix(t, rdb)
	topic := stacktest.Topic(t, brokers, 2)
	decisions := stacktest.Topic(t, brokers, 1)
	rulesPath := writeFile(t, "rules.yaml", "rules:\n  - name: login\n    action: login_failed\n    kinds: [ip]\n    limits: [3/m]\n")
	common := []string{"--brokers", strings.Join(brokers, ","), "--redis-addr", stacktest.RedisAddr(), "--key-prefix", prefix,
		"--topic", topic, "--decisions-topic", decisions, "--rules", rulesPath, "-a", "login_failed"}
	inspect := func() (int, string) {
		code, _, stderr := runCLI(t, append([]string{"inspect", "--exit-code", "--json"}, append(common, "ip=192.0.2.9")...)...)
		return code, stderr
	}
	if code, stderr := inspect(); code != 0 {
		t.Fatalf("inspect --exit-code of a clean subject: exit %d, want 0: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, append([]string{"ban", "--for", "10m", "--operator", "exit-test", "--json"}, append(common, "ip=192.0.2.9")...)...); code != 0 {
		t.Fatalf("ban: exit %d: %s", code, stderr)
	}
	if code, stderr := inspect(); code != exitFound || !strings.Contains(stderr, "1 subjects denied or banned") {
		t.Fatalf("inspect --exit-code of a banned subject: exit %d, want %d: %s", code, exitFound, stderr)
	}
}
