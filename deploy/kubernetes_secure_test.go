package deploy_test

import (
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// endpoint is a service floodgate reaches: the namespace and port of its
// address in the manifests' configuration.
type endpoint struct {
	namespace string
	port      int32
}

// endpointOf reads "<svc>.<namespace>.svc[...]:<port>".
func endpointOf(t *testing.T, hostport string) endpoint {
	t.Helper()
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatalf("address %q: %v", hostport, err)
	}
	labels := strings.Split(host, ".")
	i := slices.Index(labels, "svc")
	if i < 2 {
		t.Fatalf("address %q: want <service>.<namespace>.svc", hostport)
	}
	return endpoint{namespace: labels[i-1], port: intstr.Parse(port).IntVal}
}

// TestKubernetesSecureByDefault: the manifests as shipped are safe to
// apply. The limiter serves TLS only and requires its token, both from
// Secrets mounted as files; every secret a container reads is a file of a
// mounted Secret; PostgreSQL is reached with verify-full against a mounted
// CA; a default-deny NetworkPolicy and one per component let in only its
// own ports and let out only to DNS and the services it uses (the
// addresses configured); Prometheus checks the limiter's certificate.
func TestKubernetesSecureByDefault(t *testing.T) {
	forEachLayout(t, func(t *testing.T, _ string, objs []k8sObject) { checkSecure(t, objs) })
}

// endpointsOf reads a comma-separated list of addresses.
func endpointsOf(t *testing.T, hostports string) []endpoint {
	t.Helper()
	var es []endpoint
	for _, hp := range strings.Split(hostports, ",") {
		es = append(es, endpointOf(t, hp))
	}
	return es
}

func checkSecure(t *testing.T, objs []k8sObject) {
	secrets, configMaps := map[string]map[string]string{}, map[string]map[string]string{}
	var policies []*networkingv1.NetworkPolicy
	var monitors []*monitoringv1.ServiceMonitor
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *corev1.Secret:
			keys := map[string]string{}
			for k, b := range v.Data {
				keys[k] = string(b)
			}
			for k, s := range v.StringData {
				keys[k] = s
			}
			secrets[o.meta.Name] = keys
		case *corev1.ConfigMap:
			configMaps[o.meta.Name] = v.Data
		case *networkingv1.NetworkPolicy:
			policies = append(policies, v)
		case *monitoringv1.ServiceMonitor:
			monitors = append(monitors, v)
		}
	}
	env := configMaps["floodgate-env"]
	for k := range env {
		if strings.Contains(k, "TOKEN") || strings.Contains(k, "PASSWORD") || strings.Contains(k, "POSTGRES_URL") {
			t.Errorf("ConfigMap floodgate-env holds %s: secrets go in Secrets, as files", k)
		}
	}
	brokers := endpointsOf(t, env["FLOODGATE_BROKERS"])
	redis := endpointsOf(t, env["FLOODGATE_REDIS_ADDR"])
	pgURL, err := url.Parse(secrets["floodgate-postgres"]["FLOODGATE_POSTGRES_URL"])
	if err != nil {
		t.Fatalf("FLOODGATE_POSTGRES_URL: %v", err)
	}
	postgres := endpointOf(t, pgURL.Host)
	if m := pgURL.Query().Get("sslmode"); m != "verify-full" {
		t.Errorf("PostgreSQL sslmode %q, want verify-full (require accepts any certificate)", m)
	}
	rootCert := pgURL.Query().Get("sslrootcert")
	clientCert, clientKey := pgURL.Query().Get("sslcert"), pgURL.Query().Get("sslkey")
	if (clientCert == "") != (clientKey == "") {
		t.Errorf("PostgreSQL URL: sslcert %q without sslkey %q or the other way round", clientCert, clientKey)
	}

	// The services each workload uses.
	uses := map[string][]endpoint{
		"floodgate-setup":      append(slices.Clone(brokers), postgres),
		"floodgate-aggregator": append(append(slices.Clone(brokers), redis...), postgres),
		"floodgate-limiter":    append(slices.Clone(brokers), redis...),
		"floodgate-roller":     {postgres},
	}

	// mounted returns the Secret or ConfigMap key a path of a container
	// is, and whether it is a Secret's.
	mounted := func(pod corev1.PodSpec, c corev1.Container, path string) (source, key string, secret, ok bool) {
		for _, m := range c.VolumeMounts {
			rest, found := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
			if !found || strings.Contains(rest, "/") {
				continue
			}
			for _, v := range pod.Volumes {
				switch {
				case v.Name != m.Name:
				case v.Secret != nil:
					_, has := secrets[v.Secret.SecretName][rest]
					return v.Secret.SecretName, rest, true, has
				case v.ConfigMap != nil:
					_, has := configMaps[v.ConfigMap.Name][rest]
					return v.ConfigMap.Name, rest, false, has
				}
			}
		}
		return "", "", false, false
	}

	pods := podSpecs(objs)
	for name, pod := range pods {
		for _, c := range pod.Spec.Containers {
			where := name + "/" + c.Name
			cenv := map[string]string{}
			gotsPostgres := false
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil {
					for k, v := range configMaps[ef.ConfigMapRef.Name] {
						cenv[k] = v
					}
				}
				if ef.SecretRef != nil {
					for k, v := range secrets[ef.SecretRef.Name] {
						cenv[k] = v
					}
					gotsPostgres = gotsPostgres || ef.SecretRef.Name == "floodgate-postgres"
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				if strings.Contains(e.Name, "TOKEN") && !strings.HasSuffix(e.Name, "_FILE") {
					t.Errorf("%s: %s given as a value: give the _FILE of a mounted Secret", where, e.Name)
				}
				cenv[e.Name] = e.Value
			}
			// Every secret file is a key of a mounted Secret.
			for k, path := range cenv {
				if !strings.HasSuffix(k, "_FILE") && k != "FLOODGATE_TLS_KEY" {
					continue
				}
				if src, key, secret, ok := mounted(pod.Spec, c, path); !ok || !secret {
					t.Errorf("%s: %s=%s is not a key of a mounted Secret (%s %s)", where, k, path, src, key)
				}
			}
			if cert := cenv["FLOODGATE_TLS_CERT"]; cert != "" {
				if _, _, _, ok := mounted(pod.Spec, c, cert); !ok {
					t.Errorf("%s: FLOODGATE_TLS_CERT=%s is not a mounted key", where, cert)
				}
			}
			if gotsPostgres && rootCert != "system" {
				if _, _, _, ok := mounted(pod.Spec, c, rootCert); !ok {
					t.Errorf("%s: the PostgreSQL CA %s (sslrootcert) is not mounted", where, rootCert)
				}
			}
			if gotsPostgres && clientCert != "" {
				if _, _, _, ok := mounted(pod.Spec, c, clientCert); !ok {
					t.Errorf("%s: the PostgreSQL client certificate %s (sslcert) is not mounted", where, clientCert)
				}
				if _, _, secret, ok := mounted(pod.Spec, c, clientKey); !ok || !secret {
					t.Errorf("%s: the PostgreSQL client key %s (sslkey) is not a key of a mounted Secret", where, clientKey)
				}
			}
			// Every CA a container is told to trust is there.
			for k, path := range cenv {
				if strings.HasSuffix(k, "_CA") && path != "" {
					if _, _, _, ok := mounted(pod.Spec, c, path); !ok {
						t.Errorf("%s: %s=%s is not a mounted key", where, k, path)
					}
				}
			}
			listens := false
			for i, a := range c.Args {
				if (a == "--http-addr" || a == "--rls-addr") && i+1 < len(c.Args) && !strings.HasPrefix(c.Args[i+1], "127.") {
					listens = true
				}
			}
			if name == "floodgate-limiter" && !listens {
				t.Errorf("%s: no listener beyond loopback found in %v", where, c.Args)
			}
			tls := cenv["FLOODGATE_TLS_CERT"] != "" && cenv["FLOODGATE_TLS_KEY"] != ""
			if listens && (cenv["FLOODGATE_AUTH_TOKEN_FILE"] == "" || !tls) {
				t.Errorf("%s listens beyond loopback: token file %q, TLS %t; want both", where, cenv["FLOODGATE_AUTH_TOKEN_FILE"], tls)
			}
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				switch {
				case p == nil || !tls:
				case p.HTTPGet != nil && p.HTTPGet.Scheme != corev1.URISchemeHTTPS:
					t.Errorf("%s: probe %s over %s on a TLS listener", where, p.HTTPGet.Path, p.HTTPGet.Scheme)
				case p.GRPC != nil:
					t.Errorf("%s: gRPC probe on a TLS listener (the kubelet's speaks no TLS)", where)
				}
			}
		}
	}

	// NetworkPolicies: a default deny, and one per component.
	deny := false
	for _, np := range policies {
		both := slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) && slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		if len(np.Spec.PodSelector.MatchLabels) == 0 && len(np.Spec.PodSelector.MatchExpressions) == 0 {
			deny = deny || both && len(np.Spec.Ingress) == 0 && len(np.Spec.Egress) == 0
			if len(np.Spec.Ingress)+len(np.Spec.Egress) > 0 {
				t.Errorf("NetworkPolicy %s selects every pod and allows traffic", np.Name)
			}
		}
	}
	if !deny {
		t.Error("no default-deny NetworkPolicy (every pod, Ingress and Egress, no rules)")
	}
	for name, pod := range pods {
		var own []*networkingv1.NetworkPolicy
		for _, np := range policies {
			if len(np.Spec.PodSelector.MatchLabels) > 0 && matches(np.Spec.PodSelector.MatchLabels, pod.Labels) {
				own = append(own, np)
			}
		}
		if len(own) != 1 {
			t.Errorf("%s: %d NetworkPolicies of its own, want 1", name, len(own))
			continue
		}
		np := own[0]
		ports := map[string]bool{}
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				n := intstr.FromInt32(p.ContainerPort)
				ports[p.Name], ports[n.String()] = true, true
			}
		}
		for _, r := range np.Spec.Ingress {
			if len(r.Ports) == 0 {
				t.Errorf("NetworkPolicy %s: an ingress rule on every port", np.Name)
			}
			for _, p := range r.Ports {
				if p.Port == nil || !ports[p.Port.String()] {
					t.Errorf("NetworkPolicy %s: ingress port %v is no port of %s", np.Name, p.Port, name)
				}
			}
		}
		allowed := map[endpoint]bool{}
		for _, r := range np.Spec.Egress {
			if len(r.To) == 0 || len(r.Ports) == 0 {
				t.Errorf("NetworkPolicy %s: an egress rule to anywhere or on every port", np.Name)
			}
			for _, to := range r.To {
				ns := ""
				if to.NamespaceSelector != nil {
					ns = to.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]
				}
				for _, p := range r.Ports {
					if p.Port == nil {
						continue
					}
					e := endpoint{namespace: ns, port: p.Port.IntVal}
					if ns == "kube-system" && e.port == 53 {
						continue // DNS
					}
					if !slices.Contains(uses[name], e) {
						t.Errorf("NetworkPolicy %s lets %s out to %s:%d, which it does not use", np.Name, name, ns, e.port)
					}
					allowed[e] = true
				}
			}
		}
		for _, e := range uses[name] {
			if !allowed[e] {
				t.Errorf("NetworkPolicy %s does not let %s reach %s:%d", np.Name, name, e.namespace, e.port)
			}
		}
	}

	// Prometheus scrapes the limiter over TLS, checking its certificate.
	for _, sm := range monitors {
		for _, ep := range sm.Spec.Endpoints {
			if ep.Port != "http" {
				continue
			}
			if !strings.EqualFold(ep.Scheme.String(), "https") || ep.TLSConfig == nil || ep.TLSConfig.CA.Secret == nil ||
				(ep.TLSConfig.InsecureSkipVerify != nil && *ep.TLSConfig.InsecureSkipVerify) {
				t.Errorf("ServiceMonitor %s scrapes the limiter's http port without checking TLS", sm.Name)
			} else if _, ok := secrets[ep.TLSConfig.CA.Secret.Name][ep.TLSConfig.CA.Secret.Key]; !ok {
				t.Errorf("ServiceMonitor %s: CA %s/%s not defined", sm.Name, ep.TLSConfig.CA.Secret.Name, ep.TLSConfig.CA.Secret.Key)
			}
		}
	}
}
