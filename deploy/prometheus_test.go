package deploy_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"

	"github.com/floodgate-dev/floodgate/internal/stacktest"
)

const (
	alertsFile     = "prometheus/floodgate-alerts.yaml"
	alertsTestFile = "prometheus/floodgate-alerts_test.yaml"
)

// TestAlertRules checks the alert rules with promtool and runs their unit
// tests (each alert fires on its condition, after its for:, with its
// labels and annotations, and stays quiet otherwise).
func TestAlertRules(t *testing.T) {
	bin := stacktest.Promtool(t)
	for _, args := range [][]string{
		{"check", "rules", alertsFile},
		{"test", "rules", alertsTestFile},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// TestComposePrometheus checks the Prometheus of docker-compose.yml: every
// scrape target is a compose service listening on that port, every rule
// file is mounted from the repository, and promtool accepts the
// configuration with those files in place.
func TestComposePrometheus(t *testing.T) {
	p := loadCompose(t)
	prom, ok := p.Services["prometheus"]
	if !ok {
		t.Fatal("no prometheus service")
	}
	raw, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	mounted := map[string]string{} // container path -> repository file
	for _, v := range prom.Volumes {
		if v.Type == types.VolumeTypeBind {
			mounted[v.Target] = v.Source
		}
	}
	if !strings.HasSuffix(mounted["/etc/prometheus/prometheus.yml"], filepath.Join("deploy", "prometheus", "prometheus.yml")) {
		t.Errorf("prometheus.yml is not mounted as the configuration: %v", mounted)
	}
	scraped := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, port, err := net.SplitHostPort(target)
				if err != nil {
					t.Errorf("job %s: target %q: %v", sc.JobName, target, err)
					continue
				}
				if host == "localhost" && port == "9090" {
					continue // Prometheus itself
				}
				svc, ok := p.Services[host]
				if !ok {
					t.Errorf("job %s scrapes %s, not a compose service", sc.JobName, target)
					continue
				}
				// floodgate's services listen where their command says.
				if !strings.Contains(strings.Join(svc.Command, " "), "0.0.0.0:"+port) {
					t.Errorf("job %s scrapes %s, but %s listens elsewhere: %v", sc.JobName, target, host, svc.Command)
				}
				scraped[host] = true
			}
		}
	}
	for _, want := range []string{"aggregator", "limiter", "roller"} {
		if !scraped[want] {
			t.Errorf("Prometheus does not scrape %s", want)
		}
	}
	// The configuration as the container sees it: rule files where the
	// mounts put them.
	dir := t.TempDir()
	local := string(raw)
	for _, rf := range cfg.RuleFiles {
		src, ok := mounted[rf]
		if !ok {
			t.Errorf("rule file %s is not mounted into the prometheus service", rf)
			continue
		}
		local = strings.ReplaceAll(local, rf, src)
	}
	f := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(f, []byte(local), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(stacktest.Promtool(t), "check", "config", f).CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
}
