// Package deploy_test checks docker-compose.yml, which cannot run on machines
// without a Docker engine: it is loaded with the Compose specification's own
// loader and checked against the binary it deploys.
package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/distribution/reference"
)

func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	return loadComposeFiles(t, "../docker-compose.yml")
}

// loadComposeFiles loads docker-compose.yml with override files after it,
// as `docker compose -f docker-compose.yml -f <override>` does.
func loadComposeFiles(t *testing.T, files ...string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions(files, cli.WithWorkingDirectory(".."), cli.WithName("floodgate"))
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("load %v: %v", files, err)
	}
	return p
}

// pinned says why an image reference does not name one release: no tag,
// "latest", or a tag that is not a version (major.minor.patch; PostgreSQL's
// releases are major.minor). A digest pins whatever the tag.
func pinned(ref string) error {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return err
	}
	if _, ok := named.(reference.Digested); ok {
		return nil
	}
	tagged, ok := named.(reference.Tagged)
	if !ok {
		return fmt.Errorf("%s: no tag (latest)", ref)
	}
	version := `^v?\d+\.\d+\.\d+($|-)`
	if reference.Path(named) == "library/postgres" {
		version = `^\d+\.\d+($|-)`
	}
	if !regexp.MustCompile(version).MatchString(tagged.Tag()) {
		return fmt.Errorf("%s: tag %q is not a version (%s)", ref, tagged.Tag(), version)
	}
	return nil
}

// TestComposeImagesPinned: every image Compose pulls, with or without the
// TimescaleDB override, names one release, so `up` runs what was tested
// and a rebuild months later runs the same; the PostgreSQL by default is
// the major the tests run (scripts/stack: PostgreSQL 15), and the
// override changes the database's image only. The Dockerfile's base
// images are pinned too.
func TestComposeImagesPinned(t *testing.T) {
	base := loadCompose(t)
	timescale := loadComposeFiles(t, "../docker-compose.yml", "../deploy/compose/timescaledb.yml")
	for name, p := range map[string]*types.Project{"docker-compose.yml": base, "with timescaledb.yml": timescale} {
		built := map[string]bool{} // floodgate's own, built from the Dockerfile
		for _, s := range p.Services {
			built[s.Image] = built[s.Image] || s.Build != nil
		}
		for _, s := range p.Services {
			if built[s.Image] {
				continue
			}
			if err := pinned(s.Image); err != nil {
				t.Errorf("%s: service %s: %v", name, s.Name, err)
			}
		}
	}
	if img := base.Services["postgres"].Image; !strings.HasPrefix(img, "postgres:15.") {
		t.Errorf("postgres runs %s, want PostgreSQL 15, the tests' major", img)
	}
	if img := timescale.Services["postgres"].Image; !strings.HasPrefix(img, "timescale/timescaledb:") || !strings.HasSuffix(img, "-pg15") {
		t.Errorf("the TimescaleDB override runs %s, want timescale/timescaledb on PostgreSQL 15", img)
	}
	for name, s := range timescale.Services {
		b := base.Services[name]
		s.Image, b.Image = "", ""
		if !reflect.DeepEqual(s, b) {
			t.Errorf("the TimescaleDB override changes service %s beyond its image", name)
		}
	}

	// The Dockerfile's bases: ARG defaults the FROM lines name.
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^ARG (\w+)=(\S+)$`).FindAllStringSubmatch(string(df), -1) {
		args[m[1]] = m[2]
	}
	froms := 0
	for _, m := range regexp.MustCompile(`(?m)^FROM (?:--platform=\S+ )?(\S+)`).FindAllStringSubmatch(string(df), -1) {
		ref := m[1]
		if v, ok := strings.CutPrefix(ref, "${"); ok {
			ref = args[strings.TrimSuffix(v, "}")]
		}
		if ref == "runtime" || ref == "build" {
			continue // a stage of its own
		}
		froms++
		// distroless publishes no version tags: its static-debian12 image
		// follows Debian 12's updates (pin it by digest where that matters).
		if strings.HasPrefix(ref, "gcr.io/distroless/static-debian12:") {
			continue
		}
		if err := pinned(ref); err != nil {
			t.Errorf("Dockerfile: %v", err)
		}
	}
	if froms != 2 {
		t.Errorf("Dockerfile: %d base images found, want the Go image and the runtime's", froms)
	}
}

func TestComposeServices(t *testing.T) {
	p := loadCompose(t)
	tests := []struct {
		service    string
		image      string // prefix of the image reference
		ports      []uint32
		dependsOn  map[string]string // dependency -> condition
		healthy    bool              // has a health check
		fromBuild  bool              // floodgate's own image
		subcommand string
	}{
		{service: "kafka", image: "apache/kafka:4.", ports: []uint32{19092}, healthy: true},
		{service: "redis", image: "redis:7", ports: []uint32{6379}, healthy: true},
		{service: "postgres", image: "postgres:15.", ports: []uint32{5432}, healthy: true},
		{service: "grafana", image: "grafana/grafana:", ports: []uint32{3000}, healthy: true,
			dependsOn: map[string]string{"postgres": "service_healthy", "prometheus": "service_healthy"}},
		{service: "prometheus", image: "prom/prometheus:v3", ports: []uint32{9090}, healthy: true},
		{service: "floodgate-init", image: "floodgate:", fromBuild: true, subcommand: "setup",
			dependsOn: map[string]string{"kafka": "service_healthy", "postgres": "service_healthy"}},
		{service: "aggregator", image: "floodgate:", healthy: true, subcommand: "aggregator", ports: []uint32{9464},
			dependsOn: map[string]string{"floodgate-init": "service_completed_successfully", "redis": "service_healthy"}},
		{service: "limiter", image: "floodgate:", healthy: true, subcommand: "limiter", ports: []uint32{8080, 8081},
			dependsOn: map[string]string{"floodgate-init": "service_completed_successfully", "redis": "service_healthy"}},
		{service: "roller", image: "floodgate:", healthy: true, subcommand: "roller",
			dependsOn: map[string]string{"floodgate-init": "service_completed_successfully"}},
	}
	for _, tt := range tests {
		t.Run(tt.service, func(t *testing.T) {
			s, ok := p.Services[tt.service]
			if !ok {
				t.Fatalf("service %q missing", tt.service)
			}
			if !strings.HasPrefix(s.Image, tt.image) {
				t.Errorf("image %q, want prefix %q", s.Image, tt.image)
			}
			for _, want := range tt.ports {
				if !slices.ContainsFunc(s.Ports, func(pc types.ServicePortConfig) bool { return pc.Target == want }) {
					t.Errorf("container port %d not published (ports %v)", want, s.Ports)
				}
			}
			for dep, cond := range tt.dependsOn {
				d, ok := s.DependsOn[dep]
				if !ok {
					t.Errorf("no depends_on %q", dep)
					continue
				}
				if d.Condition != cond {
					t.Errorf("depends_on %q condition %q, want %q", dep, d.Condition, cond)
				}
			}
			if tt.healthy && (s.HealthCheck == nil || len(s.HealthCheck.Test) == 0) {
				t.Errorf("no health check")
			}
			if tt.fromBuild && (s.Build == nil || s.Build.Dockerfile != "Dockerfile") {
				t.Errorf("not built from the project's Dockerfile: %+v", s.Build)
			}
			if tt.subcommand != "" {
				if len(s.Command) == 0 || s.Command[0] != tt.subcommand {
					t.Errorf("command %v, want subcommand %q", s.Command, tt.subcommand)
				}
				if s.Environment["FLOODGATE_BROKERS"] == nil || *s.Environment["FLOODGATE_BROKERS"] != "kafka:9092" {
					t.Errorf("FLOODGATE_BROKERS not pointing at the kafka service")
				}
			}
		})
	}
	// Every dependency names a service that exists.
	for name, s := range p.Services {
		for dep := range s.DependsOn {
			if _, ok := p.Services[dep]; !ok {
				t.Errorf("%s depends on unknown service %q", name, dep)
			}
		}
	}
}

// TestComposeMountsExist checks that every bind mount points at a path in
// the repository, so Grafana's provisioning is really there.
func TestComposeMountsExist(t *testing.T) {
	p := loadCompose(t)
	for name, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s: bind mount source %s: %v", name, v.Source, err)
			}
		}
	}
	for _, f := range []string{"../Dockerfile", "../examples/rules.yaml"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestComposeCommandsParse runs each floodgate service's command line through
// the real binary's flag parser (with --help appended), so a renamed flag
// breaks this test instead of a user's deployment.
func TestComposeCommandsParse(t *testing.T) {
	p := loadCompose(t)
	bin := floodgateBinary(t)
	for name, s := range p.Services {
		if !strings.HasPrefix(s.Image, "floodgate:") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			args := append(slices.Clone([]string(s.Command)), "--help")
			out, err := exec.Command(bin, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("floodgate %v: %v\n%s", args, err, out)
			}
			for _, a := range s.Command {
				if flag, ok := strings.CutPrefix(a, "--"); ok && !strings.Contains(string(out), "--"+flag) {
					t.Errorf("flag --%s of %v not in the help of the binary", flag, s.Command)
				}
			}
		})
	}
}
