package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// layout is what a rendered layout is meant to be.
type layout struct {
	limiters, aggregators int32
	redisCluster          bool
	replicationFactor     int
	secure                bool // Kafka, Redis and PostgreSQL over TLS, as floodgate's own users
}

// TestKubernetesOverlays: each overlay is the topology its kustomization
// says, on the base's security, and the secure component composes with
// another overlay as docs/operations.md shows (cluster plus secure).
func TestKubernetesOverlays(t *testing.T) {
	want := map[string]layout{
		"base":             {limiters: 3, aggregators: 2, replicationFactor: 3},
		"overlays/single":  {limiters: 1, aggregators: 1, replicationFactor: 1},
		"overlays/cluster": {limiters: 6, aggregators: 4, redisCluster: true, replicationFactor: 3},
		"overlays/secure":  {limiters: 3, aggregators: 2, replicationFactor: 3, secure: true},
	}
	for _, l := range k8sLayouts(t) {
		if _, ok := want[l]; !ok {
			t.Errorf("layout %s has no expectations here: add it", l)
		}
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) { checkLayout(t, renderK8s(t, name), w) })
	}

	// An overlay of a user's own: Redis Cluster and the secure component.
	abs, err := filepath.Abs(k8sDir)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel := func(p string) string { // kustomize takes no absolute paths
		r, err := filepath.Rel(dir, filepath.Join(abs, p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n" +
		"resources:\n  - " + rel("overlays/cluster") + "\n" +
		"components:\n  - " + rel("components/secure") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("cluster+secure", func(t *testing.T) {
		objs := renderDir(t, "cluster+secure", dir)
		checkLayout(t, objs, layout{limiters: 6, aggregators: 4, redisCluster: true, replicationFactor: 3, secure: true})
		checkSecure(t, objs)
	})
}

func checkLayout(t *testing.T, objs []k8sObject, w layout) {
	t.Helper()
	replicas := map[string]int32{}
	pdbs := map[string]bool{}
	var env map[string]string
	var setupArgs []string
	var pgURL string
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *appsv1.Deployment:
			replicas[o.meta.Name] = 1
			if v.Spec.Replicas != nil {
				replicas[o.meta.Name] = *v.Spec.Replicas
			}
		case *policyv1.PodDisruptionBudget:
			pdbs[v.Spec.Selector.MatchLabels["app.kubernetes.io/name"]] = true
		case *batchv1.Job:
			if o.meta.Name == "floodgate-setup" {
				setupArgs = v.Spec.Template.Spec.Containers[0].Args
			}
		case *corev1.ConfigMap:
			if o.meta.Name == "floodgate-env" {
				env = v.Data
			}
		case *corev1.Secret:
			if o.meta.Name == "floodgate-postgres" {
				pgURL = v.StringData["FLOODGATE_POSTGRES_URL"]
			}
		}
	}
	if replicas["floodgate-limiter"] != w.limiters || replicas["floodgate-aggregator"] != w.aggregators {
		t.Errorf("limiters %d, aggregators %d; want %d, %d", replicas["floodgate-limiter"], replicas["floodgate-aggregator"], w.limiters, w.aggregators)
	}
	if replicas["floodgate-roller"] != 1 {
		t.Errorf("%d rollers, want 1", replicas["floodgate-roller"])
	}
	// A budget where there is more than one replica to keep.
	for _, name := range []string{"floodgate-limiter", "floodgate-aggregator"} {
		if w.limiters > 1 && name == "floodgate-limiter" && !pdbs[name] {
			t.Errorf("%d limiters and no PodDisruptionBudget", w.limiters)
		}
		if replicas[name] == 1 && pdbs[name] {
			t.Errorf("%s: one replica and a PodDisruptionBudget (it protects nothing, and blocks drains)", name)
		}
	}
	if w.aggregators > 2 && !pdbs["floodgate-aggregator"] {
		t.Errorf("%d aggregators and no PodDisruptionBudget", w.aggregators)
	}

	// The topics: as many copies as asked, on as many brokers, and no more
	// aggregators than partitions (the rest would idle).
	flag := func(name string) int {
		i := slices.Index(setupArgs, name)
		if i < 0 || i+1 >= len(setupArgs) {
			t.Fatalf("setup %v: no %s", setupArgs, name)
		}
		n, err := strconv.Atoi(setupArgs[i+1])
		if err != nil {
			t.Fatalf("setup %s: %v", name, err)
		}
		return n
	}
	if rf := flag("--replication-factor"); rf != w.replicationFactor {
		t.Errorf("replication factor %d, want %d", rf, w.replicationFactor)
	}
	if brokers := strings.Split(env["FLOODGATE_BROKERS"], ","); len(brokers) < w.replicationFactor {
		t.Errorf("%d brokers for replication factor %d", len(brokers), w.replicationFactor)
	}
	if p := flag("--partitions"); int(w.aggregators) > p {
		t.Errorf("%d aggregators for %d partitions", w.aggregators, p)
	}

	redis := strings.Split(env["FLOODGATE_REDIS_ADDR"], ",")
	if cluster := env["FLOODGATE_REDIS_CLUSTER"] == "true"; cluster != w.redisCluster || (cluster && len(redis) < 3) || (!cluster && len(redis) != 1) {
		t.Errorf("Redis %v, cluster %t; want cluster %t (three seeds at least) or one server", redis, cluster, w.redisCluster)
	}

	// Secure: every workload reaches Kafka and Redis over TLS as its own
	// user (SCRAM, not PLAIN), and PostgreSQL with a client certificate;
	// the files are mounted (checkSecure).
	if !w.secure {
		return
	}
	if !strings.Contains(pgURL, "sslcert=") || !strings.Contains(pgURL, "sslkey=") {
		t.Errorf("PostgreSQL URL without a client certificate: %s", pgURL)
	}
	uses := map[string][]string{
		"floodgate-setup":      {"KAFKA"},
		"floodgate-aggregator": {"KAFKA", "REDIS"},
		"floodgate-limiter":    {"KAFKA", "REDIS"},
	}
	for name, pod := range podSpecs(objs) {
		for _, c := range pod.Spec.Containers {
			cenv := map[string]string{}
			for _, e := range c.Env {
				cenv[e.Name] = e.Value
			}
			for _, svc := range uses[name] {
				p := "FLOODGATE_" + svc + "_"
				if cenv[p+"TLS"] != "true" || cenv[p+"TLS_CA"] == "" {
					t.Errorf("%s/%s: %s without TLS and its CA", name, c.Name, svc)
				}
				user, pw := cenv[p+"USERNAME"], cenv[p+"PASSWORD_FILE"]
				if svc == "KAFKA" {
					user, pw = cenv[p+"SASL_USERNAME"], cenv[p+"SASL_PASSWORD_FILE"]
					if m := cenv[p+"SASL_MECHANISM"]; !strings.HasPrefix(m, "scram-") {
						t.Errorf("%s/%s: Kafka SASL mechanism %q, want SCRAM", name, c.Name, m)
					}
				}
				if user == "" || pw == "" {
					t.Errorf("%s/%s: %s user %q, password file %q: want both", name, c.Name, svc, user, pw)
				}
			}
		}
	}
}

// TestKubernetesOverlayCommandLines runs every container's command line of every
// layout through the binary's help (cmd/floodgate's test parses the base's
// in full): each flag given is one of the command's, each FLOODGATE_*
// variable a container sets itself is read by its command, and each one of
// a shared ConfigMap or Secret by some container's command. An overlay's
// misspelt variable fails here instead of being ignored in a rollout.
func TestKubernetesOverlayCommandLines(t *testing.T) {
	bin := floodgateBinary(t)
	forEachLayout(t, func(t *testing.T, _ string, objs []k8sObject) {
		shared := map[string]map[string]string{} // "ConfigMap/name" -> data
		for _, o := range objs {
			switch v := o.obj.(type) {
			case *corev1.ConfigMap:
				shared["ConfigMap/"+o.meta.Name] = v.Data
			case *corev1.Secret:
				shared["Secret/"+o.meta.Name] = v.StringData
			}
		}
		given, read := map[string]bool{}, map[string]bool{}
		for name, pod := range podSpecs(objs) {
			for _, c := range pod.Spec.Containers {
				where := name + "/" + c.Name
				out, err := exec.Command(bin, append(slices.Clone(c.Args), "--help")...).CombinedOutput()
				if err != nil {
					t.Errorf("%s: floodgate %v --help: %v\n%s", where, c.Args, err, out)
					continue
				}
				help := string(out)
				for _, a := range c.Args {
					if f, ok := strings.CutPrefix(a, "--"); ok && !strings.Contains(help, "--"+f) {
						t.Errorf("%s: flag --%s is not one of floodgate %s's", where, f, c.Args[0])
					}
				}
				for _, e := range c.Env {
					if !readsEnv(help, e.Name) {
						t.Errorf("%s: %s is read by no flag of floodgate %s (a typo?)", where, e.Name, strings.Join(c.Args, " "))
					}
				}
				for _, ef := range c.EnvFrom {
					var data map[string]string
					if ef.ConfigMapRef != nil {
						data = shared["ConfigMap/"+ef.ConfigMapRef.Name]
					}
					if ef.SecretRef != nil {
						data = shared["Secret/"+ef.SecretRef.Name]
					}
					for k := range data {
						given[k] = true
						read[k] = read[k] || readsEnv(help, k)
					}
				}
			}
		}
		for k := range given {
			if strings.HasPrefix(k, "FLOODGATE_") && !read[k] {
				t.Errorf("%s is given to containers whose commands read no such variable (a typo?)", k)
			}
		}
	})
}

// readsEnv: a command's help names the variable among its flags' ($NAME).
func readsEnv(help, name string) bool {
	return regexp.MustCompile(`\$` + regexp.QuoteMeta(name) + `\b`).MatchString(help)
}
