package operator_test

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/operator"
)

// adminCLI runs the CLI through limiter A's admin endpoints with the token
// file given, and Redis and Kafka pointed where nothing listens: the
// commands must need neither.
func (s *services) adminCLI(t *testing.T, tokenFile string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(s.bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOODGATE_") && !strings.HasPrefix(kv, "USER=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "FLOODGATE_ADMIN_URL="+s.adminURL, "FLOODGATE_ADMIN_TOKEN_FILE="+tokenFile,
		"FLOODGATE_REDIS_ADDR=127.0.0.1:1", "FLOODGATE_BROKERS=127.0.0.1:1", "FLOODGATE_RULES=/nonexistent/rules.yaml")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// stable blanks what differs between two inspections taken a moment
// apart: timestamps and seconds left.
var unstable = regexp.MustCompile(`\d{4}-\d\d-\d\dT[0-9:.]+Z|\b\d+s\b`)

// throughAdminURL: inspect, ban, unban and reset through --admin-url give
// what the direct commands give, recorded under the token's operator; the
// API's refusals are clear CLI errors with the server's message.
func (s *services) throughAdminURL(t *testing.T) {
	dir := t.TempDir()
	aliceFile := filepath.Join(dir, "alice")
	secretOnly := filepath.Join(dir, "bob")
	wrong := filepath.Join(dir, "wrong")
	several := filepath.Join(dir, "several")
	for f, v := range map[string]string{aliceFile: "alice=" + aliceSecret + "\n", secretOnly: bobSecret + "\n", wrong: "not-a-token-0123456789\n",
		several: "alice=" + aliceSecret + "\nbob=" + bobSecret + "\n"} {
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run := func(tokenFile string, args ...string) string {
		t.Helper()
		out, stderr, err := s.adminCLI(t, tokenFile, args...)
		if err != nil {
			t.Fatalf("floodgate %s through --admin-url: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
		return out
	}
	const ip, q = "203.0.113.30", "action=login_failed&ip=203.0.113.30"
	s.publish(t, "login_failed", "ip", ip, 6)
	s.untilEvery(t, "check", q, http.StatusTooManyRequests, time.Now())
	s.waitCounted(t)

	// inspect: the same text and the same JSON as the direct command.
	direct := s.cli(t, "inspect", "--action", "login_failed", "ip="+ip)
	viaAPI := run(aliceFile, "inspect", "--action", "login_failed", "ip="+ip)
	if a, b := unstable.ReplaceAllString(string(direct), "_"), unstable.ReplaceAllString(viaAPI, "_"); a != b || !strings.Contains(a, "deny record: rule login-failed") {
		t.Fatalf("inspect through the admin API differs from the direct one:\n%s\nvs direct:\n%s", viaAPI, direct)
	}
	var dIn, aIn operator.Inspection
	if err := json.Unmarshal(s.cli(t, "inspect", "--action", "login_failed", "ip="+ip, "--json"), &dIn); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(run(secretOnly, "inspect", "--action", "login_failed", "ip="+ip, "--json")), &aIn); err != nil {
		t.Fatal(err)
	}
	if dIn.Subjects[0].Rules[0].Limits[0].Count != 6 || aIn.Subjects[0].Rules[0].Limits[0].Count != 6 || dIn.Exact.Allowed || aIn.Exact.Allowed ||
		dIn.Subjects[0].Deny == nil || aIn.Subjects[0].Deny == nil || dIn.Subjects[0].Partition != aIn.Subjects[0].Partition {
		t.Fatalf("inspect --json: direct %+v, through the admin API %+v", dIn, aIn)
	}

	// unban through the API: every limiter admits, the audit names alice.
	out := run(aliceFile, "unban", "--action", "login_failed", "ip="+ip)
	if !strings.Contains(out, "unban login_failed ip "+ip+" by alice") || !strings.Contains(out, "cleared deny") {
		t.Fatalf("unban through the admin API: %s", out)
	}
	s.untilEvery(t, "check", q, http.StatusOK, time.Now())

	// ban: the token's name, not $USER or --operator, is the operator.
	var ban operator.Result
	if err := json.Unmarshal([]byte(run(secretOnly, "ban", "--action", "login_failed", "ip="+ip, "--for", "2d", "-m", "ticket 31", "--json")), &ban); err != nil {
		t.Fatal(err)
	}
	if ban.Operator != "bob" || ban.Op != "ban" || ban.Until == nil || ban.Until.Sub(ban.At) != 48*time.Hour || ban.AppliedHere == nil || !*ban.AppliedHere {
		t.Fatalf("ban through the admin API: %+v", ban)
	}
	s.untilEvery(t, "check", q, http.StatusTooManyRequests, time.Now())
	if out := s.cli(t, "inspect", "--action", "login_failed", "ip="+ip); !strings.Contains(string(out), "is banned by bob") || !strings.Contains(string(out), "ticket 31") {
		t.Fatalf("direct inspect after a ban through the admin API:\n%s", out)
	}

	// reset: the ban and the counters go, as a direct reset does.
	var res operator.Result
	if err := json.Unmarshal([]byte(run(aliceFile, "reset", "--action", "login_failed", "ip="+ip, "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if sr := res.Subjects[0]; res.Op != "reset" || sr.DeletedKeys == 0 || sr.Offset == nil || !strings.Contains(strings.Join(sr.Cleared, ","), "ban") {
		t.Fatalf("reset through the admin API: %+v", res)
	}
	s.untilEvery(t, "check", q, http.StatusOK, time.Now())
	if code, body := s.decide(t, s.limB, "exact", q); code != http.StatusOK {
		t.Fatalf("exact check after a reset through the admin API: %d %s", code, body)
	}

	// Refusals: clear errors with the server's message, nothing printed.
	for _, c := range []struct {
		name, tokenFile string
		args            []string
		want            []string
	}{
		{"wrong token", wrong, []string{"ban", "--action", "login_failed", "ip=" + ip, "--for", "1h"}, []string{"401", "missing or wrong admin token"}},
		{"bad request", aliceFile, []string{"ban", "--action", "nothing", "ip=" + ip, "--for", "1h"}, []string{"400", "nothing"}},
		{"--operator", aliceFile, []string{"unban", "--action", "login_failed", "ip=" + ip, "--operator", "mallory"}, []string{"--operator", "admin token"}},
		{"no token file", "", []string{"inspect", "--action", "login_failed", "ip=" + ip}, []string{"--admin-token-file"}},
		{"the limiter's file of several tokens", several, []string{"inspect", "--action", "login_failed", "ip=" + ip}, []string{"several tokens"}},
	} {
		out, stderr, err := s.adminCLI(t, c.tokenFile, c.args...)
		t.Logf("%s: %s", c.name, strings.TrimSpace(stderr))
		if err == nil || out != "" {
			t.Errorf("%s: exit %v, output %q", c.name, err, out)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: error %q lacks %q", c.name, stderr, w)
			}
		}
	}
}
