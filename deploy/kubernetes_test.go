package deploy_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/floodgate-dev/floodgate/internal/rules"
)

// k8sDir holds the base (secure as shipped, every component), the overlays
// that vary its topology, and the components overlays add.
const k8sDir = "kubernetes"

// k8sObject is one decoded object of a rendered layout.
type k8sObject struct {
	kind string
	meta metav1.ObjectMeta
	obj  any
}

// newObject is the API type of a document's apiVersion and kind: what the
// API server would decode it into. A kind missing here fails the test.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return &corev1.Namespace{}, nil
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "batch/v1 Job":
		return &batchv1.Job{}, nil
	case "batch/v1 CronJob":
		return &batchv1.CronJob{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "networking.k8s.io/v1 NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &monitoringv1.PrometheusRule{}, nil
	}
	return nil, fmt.Errorf("no API type for %s %s", apiVersion, kind)
}

// strictJSON decodes YAML into v through JSON, as kubectl does, failing on
// any field v's type does not have.
func strictJSON(y []byte, v any) error {
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}

// k8sLayouts are the directories a user gives `kubectl apply -k`: the base
// and every overlay, each found on disk so a new overlay is tested too.
func k8sLayouts(t *testing.T) []string {
	t.Helper()
	overlays, err := filepath.Glob(filepath.Join(k8sDir, "overlays", "*", "kustomization.yaml"))
	if err != nil || len(overlays) == 0 {
		t.Fatalf("no overlays: %v", err)
	}
	layouts := []string{"base"}
	for _, o := range overlays {
		layouts = append(layouts, filepath.ToSlash(filepath.Join("overlays", filepath.Base(filepath.Dir(o)))))
	}
	return layouts
}

// baseKustomization is the base's kustomization.yaml, decoded strictly
// into kustomize's own type; every manifest of the base is one of its
// resources.
func baseKustomization(t *testing.T) kusttypes.Kustomization {
	t.Helper()
	var k kusttypes.Kustomization
	b, err := os.ReadFile(filepath.Join(k8sDir, "base", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := strictJSON(b, &k); err != nil {
		t.Fatalf("base/kustomization.yaml: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(k8sDir, "base", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f := filepath.Base(f); f != "kustomization.yaml" && !slices.Contains(k.Resources, f) {
			t.Errorf("base/%s is not a resource of base/kustomization.yaml", f)
		}
	}
	if len(k.Images) != 1 {
		t.Fatalf("base/kustomization.yaml: %d images, want floodgate's", len(k.Images))
	}
	return k
}

// renderK8s builds a layout as `kubectl apply -k` (kustomize's krusty, the
// library kubectl embeds) does and decodes every object strictly into its
// API type.
func renderK8s(t *testing.T, layout string) []k8sObject {
	t.Helper()
	return renderDir(t, layout, filepath.Join(k8sDir, layout))
}

func renderDir(t *testing.T, layout, dir string) []k8sObject {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", layout, err)
	}
	var objs []k8sObject
	for _, r := range m.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: %s: %v", layout, r.CurId(), err)
		}
		obj, err := newObject(r.GetApiVersion(), r.GetKind())
		if err != nil {
			t.Fatalf("%s: %v", layout, err)
		}
		if err := strictJSON(doc, obj); err != nil {
			t.Fatalf("%s: %s %s: %v", layout, r.GetKind(), r.GetName(), err)
		}
		meta := obj.(interface{ GetObjectMeta() metav1.Object }).GetObjectMeta()
		objs = append(objs, k8sObject{kind: r.GetKind(), obj: obj, meta: metav1.ObjectMeta{
			Name: meta.GetName(), Namespace: meta.GetNamespace(), Labels: meta.GetLabels(),
		}})
	}
	return objs
}

// forEachLayout runs check on every layout's objects, a subtest each.
func forEachLayout(t *testing.T, check func(t *testing.T, layout string, objs []k8sObject)) {
	for _, layout := range k8sLayouts(t) {
		t.Run(layout, func(t *testing.T) { check(t, layout, renderK8s(t, layout)) })
	}
}

// podSpecs are the pod templates of the workloads, by workload name.
func podSpecs(objs []k8sObject) map[string]corev1.PodTemplateSpec {
	pods := map[string]corev1.PodTemplateSpec{}
	for _, o := range objs {
		switch w := o.obj.(type) {
		case *appsv1.Deployment:
			pods[o.meta.Name] = w.Spec.Template
		case *batchv1.Job:
			pods[o.meta.Name] = w.Spec.Template
		case *batchv1.CronJob:
			pods[o.meta.Name] = w.Spec.JobTemplate.Spec.Template
		}
	}
	return pods
}

// TestKubernetesManifests decodes every object strictly into its API type
// and checks what ties them together: names referenced exist, Services
// and probes name real ports, selectors select, the rules are the
// example's, the PrometheusRule is the alerts file.
func TestKubernetesManifests(t *testing.T) {
	k := baseKustomization(t)
	image := k.Images[0].NewName + ":" + k.Images[0].NewTag
	forEachLayout(t, func(t *testing.T, _ string, objs []k8sObject) { checkManifests(t, k, image, objs) })
}

func checkManifests(t *testing.T, k kusttypes.Kustomization, image string, objs []k8sObject) {
	byKind := map[string]map[string]k8sObject{}
	for _, o := range objs {
		if byKind[o.kind] == nil {
			byKind[o.kind] = map[string]k8sObject{}
		}
		if _, dup := byKind[o.kind][o.meta.Name]; dup {
			t.Errorf("%s %s defined twice", o.kind, o.meta.Name)
		}
		byKind[o.kind][o.meta.Name] = o
		if o.kind != "Namespace" && o.meta.Namespace != k.Namespace {
			t.Errorf("%s %s: namespace %q, want %q", o.kind, o.meta.Name, o.meta.Namespace, k.Namespace)
		}
		if o.meta.Labels["app.kubernetes.io/part-of"] != "floodgate" {
			t.Errorf("%s %s: no app.kubernetes.io/part-of=floodgate label (the ServiceMonitor selects on it)", o.kind, o.meta.Name)
		}
	}
	for _, kind := range []string{"Namespace", "ConfigMap", "Secret", "Job", "Deployment", "Service", "ServiceMonitor", "PrometheusRule"} {
		if len(byKind[kind]) == 0 {
			t.Errorf("no %s", kind)
		}
	}
	for _, name := range []string{"floodgate-setup", "floodgate-aggregator", "floodgate-limiter", "floodgate-roller"} {
		if byKind["Job"][name].obj == nil && byKind["Deployment"][name].obj == nil && byKind["CronJob"][name].obj == nil {
			t.Errorf("no workload %s", name)
		}
	}

	pods := podSpecs(objs)
	for name, pod := range pods {
		for _, c := range pod.Spec.Containers {
			where := name + "/" + c.Name
			if c.Image != image {
				t.Errorf("%s: image %q is not the kustomization's %q", where, c.Image, image)
			}
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil && byKind["ConfigMap"][ef.ConfigMapRef.Name].obj == nil {
					t.Errorf("%s: envFrom ConfigMap %s not defined", where, ef.ConfigMapRef.Name)
				}
				if ef.SecretRef != nil && byKind["Secret"][ef.SecretRef.Name].obj == nil {
					t.Errorf("%s: envFrom Secret %s not defined", where, ef.SecretRef.Name)
				}
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				if p == nil {
					continue
				}
				if h := p.HTTPGet; h != nil && h.Port.Type == intstr.String {
					if _, ok := ports[h.Port.StrVal]; !ok {
						t.Errorf("%s: probe port %q not a container port", where, h.Port.StrVal)
					}
				}
				if g := p.GRPC; g != nil && !slices.Contains(slices.Collect(maps.Values(ports)), g.Port) {
					t.Errorf("%s: gRPC probe port %d not a container port", where, g.Port)
				}
			}
			if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
				t.Errorf("%s: root filesystem not read-only", where)
			}
			for _, m := range c.VolumeMounts {
				if m.SubPath != "" {
					t.Errorf("%s: volume %s mounted with subPath: a ConfigMap change would never reach it", where, m.Name)
				}
				if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
					t.Errorf("%s: mount of undefined volume %s", where, m.Name)
				}
			}
		}
		for _, v := range pod.Spec.Volumes {
			if v.ConfigMap != nil && byKind["ConfigMap"][v.ConfigMap.Name].obj == nil {
				t.Errorf("%s: volume ConfigMap %s not defined", name, v.ConfigMap.Name)
			}
			if v.Secret != nil && byKind["Secret"][v.Secret.SecretName].obj == nil {
				t.Errorf("%s: volume Secret %s not defined", name, v.Secret.SecretName)
			}
		}
	}

	// Services select a workload's pods and name its ports.
	svcPorts := map[string][]string{}
	for name, o := range byKind["Service"] {
		svc := o.obj.(*corev1.Service)
		var pod *corev1.PodTemplateSpec
		for _, p := range pods {
			if len(svc.Spec.Selector) > 0 && matches(svc.Spec.Selector, p.Labels) {
				pod = &p
			}
		}
		if pod == nil {
			t.Errorf("Service %s selects no workload's pods", name)
			continue
		}
		for _, sp := range svc.Spec.Ports {
			svcPorts[name] = append(svcPorts[name], sp.Name)
			if sp.TargetPort.Type == intstr.String && !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool {
				return slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == sp.TargetPort.StrVal })
			}) {
				t.Errorf("Service %s port %s: target port %q not a container port", name, sp.Name, sp.TargetPort.StrVal)
			}
		}
	}
	for name, o := range byKind["PodDisruptionBudget"] {
		pdb := o.obj.(*policyv1.PodDisruptionBudget)
		if !slices.ContainsFunc(slices.Collect(maps.Values(pods)), func(p corev1.PodTemplateSpec) bool {
			return matches(pdb.Spec.Selector.MatchLabels, p.Labels)
		}) {
			t.Errorf("PodDisruptionBudget %s selects no workload's pods", name)
		}
	}

	// Every ServiceMonitor endpoint port is a port of some selected Service.
	for name, o := range byKind["ServiceMonitor"] {
		sm := o.obj.(*monitoringv1.ServiceMonitor)
		for _, ep := range sm.Spec.Endpoints {
			found := false
			for svc, so := range byKind["Service"] {
				if matches(sm.Spec.Selector.MatchLabels, so.meta.Labels) && slices.Contains(svcPorts[svc], ep.Port) {
					found = true
				}
			}
			if !found {
				t.Errorf("ServiceMonitor %s: endpoint port %q on no selected Service", name, ep.Port)
			}
		}
	}

	// The rules ConfigMap is the example rules file, and it parses.
	example, err := os.ReadFile("../examples/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cm := byKind["ConfigMap"]["floodgate-rules"].obj.(*corev1.ConfigMap)
	if *updateRules {
		syncRulesConfigMap(t, example)
	} else if got := cm.Data["rules.yaml"]; got != string(example) {
		t.Errorf("ConfigMap floodgate-rules differs from examples/rules.yaml: go test ./deploy -run TestKubernetesManifests -update-rules")
	}
	if _, err := rules.Parse([]byte(cm.Data["rules.yaml"])); err != nil {
		t.Errorf("ConfigMap floodgate-rules: %v", err)
	}
	env := byKind["ConfigMap"]["floodgate-env"].obj.(*corev1.ConfigMap)
	if r := env.Data["FLOODGATE_RULES"]; !strings.HasPrefix(r, "/etc/floodgate/rules/") {
		t.Errorf("FLOODGATE_RULES %q is not in the rules volume", r)
	}

	// The dashboards ConfigMap holds every dashboard of grafana/dashboards
	// as it is, labelled for Grafana's sidecar.
	dashboards, err := filepath.Glob("grafana/dashboards/*.json")
	if err != nil || len(dashboards) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	dcm, _ := byKind["ConfigMap"]["floodgate-grafana-dashboards"].obj.(*corev1.ConfigMap)
	if dcm == nil {
		t.Fatal("no ConfigMap floodgate-grafana-dashboards")
	}
	if dcm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap floodgate-grafana-dashboards: labels %v, want grafana_dashboard=1 (the sidecar selects on it)", dcm.Labels)
	}
	if len(dcm.Data) != len(dashboards) {
		t.Errorf("ConfigMap floodgate-grafana-dashboards holds %d dashboards, want the %d of grafana/dashboards", len(dcm.Data), len(dashboards))
	}
	for _, f := range dashboards {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := dcm.Data[filepath.Base(f)]; !ok || got != string(want) {
			t.Errorf("ConfigMap floodgate-grafana-dashboards: %s missing or not the file (present %t)", filepath.Base(f), ok)
		}
	}

	// The PrometheusRule is deploy/prometheus/floodgate-alerts.yaml.
	pr := byKind["PrometheusRule"]["floodgate"].obj.(*monitoringv1.PrometheusRule)
	var file struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := strictJSON(b, &file); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	got, _ := json.Marshal(pr.Spec.Groups)
	want, _ := json.Marshal(file.Groups)
	if !bytes.Equal(got, want) {
		t.Errorf("PrometheusRule floodgate's groups differ from %s:\n got %s\nwant %s", alertsFile, got, want)
	}
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// TestKubernetesStrictDecoding: a misspelt field fails the decoding the
// manifests test relies on.
func TestKubernetesStrictDecoding(t *testing.T) {
	doc := []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicas: 1\n  replica: 2\n")
	if err := strictJSON(doc, &appsv1.Deployment{}); err == nil {
		t.Fatal("unknown field accepted")
	}
	doc = []byte("apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nspec:\n  endpoints: [{port: http, intervall: 5s}]\n")
	if err := strictJSON(doc, &monitoringv1.ServiceMonitor{}); err == nil {
		t.Fatal("unknown ServiceMonitor field accepted")
	}
}

var updateRules = flag.Bool("update-rules", false, "rewrite the rules ConfigMap (kubernetes/base/rules.yaml) from examples/rules.yaml")

// syncRulesConfigMap writes example into base/rules.yaml's data block,
// indented under "rules.yaml: |", keeping the comments above it.
func syncRulesConfigMap(t *testing.T, example []byte) {
	t.Helper()
	const path, block = "kubernetes/base/rules.yaml", "  rules.yaml: |\n"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	head, _, ok := strings.Cut(string(b), block)
	if !ok {
		t.Fatalf("%s: no %q block", path, strings.TrimSpace(block))
	}
	var out strings.Builder
	out.WriteString(head + block)
	for _, l := range strings.SplitAfter(string(example), "\n") {
		if strings.TrimSpace(l) != "" {
			out.WriteString("    ")
		}
		out.WriteString(l)
	}
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
