package deploy_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"sigs.k8s.io/yaml"

	"github.com/floodgate-dev/floodgate/internal/history/historytest"
	"github.com/floodgate-dev/floodgate/migrations"
)

// TestComposePublishesOnLoopback: no published port is reachable from other
// hosts, Redis and PostgreSQL have passwords and the limiter a token.
func TestComposePublishesOnLoopback(t *testing.T) {
	p := loadCompose(t)
	for name, s := range p.Services {
		for _, pc := range s.Ports {
			if pc.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes %d on %q, want 127.0.0.1", name, pc.Target, pc.HostIP)
			}
		}
	}
	env := func(service, key string) string {
		v := p.Services[service].Environment[key]
		if v == nil {
			return ""
		}
		return *v
	}
	if env("limiter", "FLOODGATE_AUTH_TOKEN") == "" {
		t.Error("the limiter has no token")
	}
	if env("redis", "REDIS_PASSWORD") == "" || env("limiter", "FLOODGATE_REDIS_PASSWORD") != env("redis", "REDIS_PASSWORD") {
		t.Error("Redis has no password, or floodgate not the same one")
	}
	if env("postgres", "POSTGRES_PASSWORD") == "floodgate" {
		t.Error("PostgreSQL's password is the user name")
	}
}

// grafanaRole is the login role grafana-db-role makes and its SQL.
var grafanaRole = regexp.MustCompile(`CREATE ROLE (\w+) LOGIN`)

// Grafana has no anonymous viewers and an admin password of the
// deployment's; it reads PostgreSQL as a login role of its own, a member
// of floodgate_reader made by the grafana-db-role service after the
// migrations, never as the superuser that owns history. The data source
// provisioning defaults to that role and to no password.
func TestComposeGrafanaSignsInAndReadsOnly(t *testing.T) {
	p := loadCompose(t)
	env := func(service, key string) string {
		v := p.Services[service].Environment[key]
		if v == nil {
			return ""
		}
		return *v
	}
	if v := env("grafana", "GF_AUTH_ANONYMOUS_ENABLED"); v != "false" {
		t.Errorf("grafana GF_AUTH_ANONYMOUS_ENABLED %q, want \"false\"", v)
	}
	if v := env("grafana", "GF_SECURITY_ADMIN_PASSWORD"); v == "" || v == "admin" {
		t.Errorf("grafana's admin password %q: Grafana's default", v)
	}
	role, ok := p.Services["grafana-db-role"]
	if !ok || len(role.Command) != 1 {
		t.Fatalf("no grafana-db-role service with one script (command %v)", role.Command)
	}
	script := role.Command[0]
	m := grafanaRole.FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("grafana-db-role makes no login role:\n%s", script)
	}
	user := m[1]
	if got := env("grafana", "FLOODGATE_PG_USER"); got != user || got == env("postgres", "POSTGRES_USER") {
		t.Errorf("grafana reads PostgreSQL as %q, want %q (not the superuser %q)", got, user, env("postgres", "POSTGRES_USER"))
	}
	if pw := env("grafana", "FLOODGATE_PG_PASSWORD"); pw == "" || pw == env("postgres", "POSTGRES_PASSWORD") || pw != env("grafana-db-role", "GRAFANA_PG_PASSWORD") {
		t.Errorf("grafana's PostgreSQL password: empty, the superuser's, or not the one grafana-db-role sets")
	}
	if d := p.Services["grafana"].DependsOn["grafana-db-role"]; d.Condition != "service_completed_successfully" {
		t.Errorf("grafana depends on grafana-db-role %q, want service_completed_successfully", d.Condition)
	}
	if d := role.DependsOn["floodgate-init"]; d.Condition != "service_completed_successfully" {
		t.Errorf("grafana-db-role depends on floodgate-init %q, want service_completed_successfully (the migrations make floodgate_reader)", d.Condition)
	}

	b, err := os.ReadFile("grafana/provisioning/datasources/floodgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds struct {
		Datasources []struct {
			User           string            `json:"user"`
			SecureJSONData map[string]string `json:"secureJsonData"`
		} `json:"datasources"`
	}
	if err := yaml.Unmarshal(b, &ds); err != nil || len(ds.Datasources) != 1 {
		t.Fatalf("data source provisioning: %v (%d data sources)", err, len(ds.Datasources))
	}
	if u := ds.Datasources[0].User; u != "${FLOODGATE_PG_USER:-"+user+"}" {
		t.Errorf("the data source's user %q, want %s by default", u, user)
	}
	if pw := ds.Datasources[0].SecureJSONData["password"]; strings.Contains(pw, ":-") {
		t.Errorf("the data source's password %q has a default", pw)
	}
}

// The grafana-db-role script, run twice on a migrated database of a server
// of the test's own as the compose service runs it: Grafana's role then
// reads what the dashboards read, and can neither write nor read the
// consumer offsets.
func TestComposeGrafanaRoleScript(t *testing.T) {
	p := loadCompose(t)
	script := p.Services["grafana-db-role"].Command[0]
	psqlLine, rest, ok := strings.Cut(script, "<<'SQL'\n")
	sql, _, ok2 := strings.Cut(rest, "\nSQL")
	if !ok || !ok2 || !strings.Contains(psqlLine, "ON_ERROR_STOP=1") || !strings.Contains(psqlLine, `-v pw="$GRAFANA_PG_PASSWORD"`) {
		t.Fatalf("grafana-db-role: want psql -v ON_ERROR_STOP=1 -v pw=\"$GRAFANA_PG_PASSWORD\" <<'SQL' ... SQL, got:\n%s", script)
	}
	user := grafanaRole.FindStringSubmatch(script)[1]
	psql, err := exec.LookPath("psql")
	if err != nil {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
		if len(found) == 0 {
			t.Fatal("no psql (scripts/stack up installs PostgreSQL)")
		}
		psql = found[len(found)-1]
	}

	srv := historytest.StartPostgres(t)
	pool := srv.Pool(t) // migrated: floodgate_reader exists
	dbURL := pool.Config().ConnString()
	for range 2 {
		cmd := exec.Command(psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", "pw=test-grafana-pw", dbURL)
		cmd.Stdin = strings.NewReader(sql + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("grafana-db-role's SQL: %v\n%s", err, out)
		}
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, "test-grafana-pw")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	defer conn.Close(ctx)
	var member bool
	if err := conn.QueryRow(ctx, `SELECT pg_has_role(current_user, $1, 'MEMBER')`, migrations.ReaderRole).Scan(&member); err != nil || !member {
		t.Fatalf("%s a member of %s: %v, %v", user, migrations.ReaderRole, member, err)
	}
	if _, err := conn.Exec(ctx, `SELECT * FROM floodgate.actions()`); err != nil {
		t.Errorf("as %s: %v", user, err)
	}
	for _, q := range []string{
		`INSERT INTO floodgate.history_late (action, subject, kind, n) VALUES ('visit', 'x', 'ip', 1)`,
		`SELECT * FROM floodgate.consumer_offsets`,
	} {
		var pe *pgconn.PgError
		if _, err := conn.Exec(ctx, q); !errors.As(err, &pe) || (pe.Code != "42501" && pe.Code != "25006") {
			t.Errorf("as %s: %s: %v; want permission denied or read-only transaction", user, q, err)
		}
	}
}
