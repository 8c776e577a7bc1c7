// Package envoy_test checks the Envoy examples: envoy.yaml decoded into
// Envoy's bootstrap proto and validated, the Istio EnvoyFilter's patch
// values into theirs, and the descriptors they send against the rules.
package envoy_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// The typed_config types of the examples, registered for protojson.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/floodgate-dev/floodgate/internal/rules"
)

// decode reads YAML into m strictly: an unknown field or an Any of an
// unregistered type fails.
func decode(t *testing.T, y []byte, m proto.Message) {
	t.Helper()
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(j, m); err != nil {
		t.Fatalf("decode %s: %v", m.ProtoReflect().Descriptor().FullName(), err)
	}
}

type allValidator interface{ ValidateAll() error }

// validate runs the generated validation of m and of every message packed
// in an Any inside it: protoc-gen-validate checks an Any's type, never its
// contents.
func validate(m proto.Message) error {
	var errs []error
	var walk func(protoreflect.Message)
	walk = func(pm protoreflect.Message) {
		if a, ok := pm.Interface().(*anypb.Any); ok {
			inner, err := a.UnmarshalNew()
			if err != nil {
				errs = append(errs, fmt.Errorf("any %s: %w", a.GetTypeUrl(), err))
				return
			}
			if v, ok := inner.(allValidator); ok {
				if err := v.ValidateAll(); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", a.GetTypeUrl(), err))
				}
			}
			walk(inner.ProtoReflect())
			return
		}
		pm.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := range v.List().Len() {
					walk(v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				walk(v.Message())
			}
			return true
		})
	}
	if v, ok := m.(allValidator); ok {
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, err)
		}
	}
	walk(m.ProtoReflect())
	return errors.Join(errs...)
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kindsOf are the kinds of examples/rules.yaml's rules, by action.
func kindsOf(t *testing.T) map[string][]string {
	t.Helper()
	set, err := rules.Parse(read(t, filepath.Join("..", "rules.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string][]string{}
	for _, r := range set.Rules() {
		kinds[r.Action] = append(kinds[r.Action], r.Kinds...)
	}
	return kinds
}

// checkDescriptors: the kind of every descriptor a rate_limits entry
// makes (its keys joined by ".": one key is a kind, several a composite,
// docs/limiter.md) is counted by a rule of the action of every domain it
// is sent with (floodgate maps domain to action).
func checkDescriptors(t *testing.T, limits []*routev3.RateLimit, domains []string) {
	t.Helper()
	kinds := kindsOf(t)
	if len(limits) == 0 {
		t.Fatal("no rate_limits")
	}
	for _, rl := range limits {
		var keys []string
		for _, a := range rl.GetActions() {
			h := a.GetRequestHeaders()
			if h == nil {
				t.Errorf("action %v: the examples send request_headers descriptors only", a)
				continue
			}
			keys = append(keys, h.GetDescriptorKey())
		}
		kind := strings.Join(keys, ".")
		for _, d := range domains {
			if !slices.Contains(kinds[d], kind) {
				t.Errorf("descriptor kind %q: no rule of action %q counts it (kinds %v)", kind, d, kinds[d])
			}
		}
	}
}

func checkFilter(t *testing.T, rl *ratelimitv3.RateLimit) {
	t.Helper()
	if !rl.GetFailureModeDeny() {
		t.Error("failure_mode_deny is off: an unreachable limiter would let everything through")
	}
	if rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc() == nil {
		t.Error("rate_limit_service is not an envoy_grpc cluster")
	}
}

func TestBootstrap(t *testing.T) {
	var bs bootstrapv3.Bootstrap
	decode(t, read(t, "envoy.yaml"), &bs)
	if err := validate(&bs); err != nil {
		t.Fatal(err)
	}

	var hcm hcmv3.HttpConnectionManager
	var rl ratelimitv3.RateLimit
	if err := bs.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range hcm.GetHttpFilters() {
		names = append(names, f.GetName())
		if f.GetName() == "envoy.filters.http.ratelimit" {
			if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := []string{"envoy.filters.http.header_mutation", "envoy.filters.http.ratelimit", "envoy.filters.http.router"}; !slices.Equal(names, want) {
		t.Fatalf("http filters %v, want %v (the header first: the actions read it)", names, want)
	}
	checkFilter(t, &rl)
	cluster := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	if !slices.ContainsFunc(bs.GetStaticResources().GetClusters(), func(c *clusterv3.Cluster) bool { return c.GetName() == cluster }) {
		t.Errorf("rate limit cluster %q is not defined", cluster)
	}

	domains := []string{rl.GetDomain()}
	vh := hcm.GetRouteConfig().GetVirtualHosts()[0]
	for _, r := range vh.GetRoutes() {
		if a, ok := r.GetTypedPerFilterConfig()["envoy.filters.http.ratelimit"]; ok {
			var per ratelimitv3.RateLimitPerRoute
			if err := a.UnmarshalTo(&per); err != nil {
				t.Fatal(err)
			}
			domains = append(domains, per.GetDomain())
		}
	}
	checkDescriptors(t, vh.GetRateLimits(), domains)
}

// envoyFilter is the part of Istio's EnvoyFilter the test reads; its patch
// values are Envoy protos in YAML.
type envoyFilter struct {
	Kind string `json:"kind"`
	Spec struct {
		ConfigPatches []struct {
			ApplyTo string `json:"applyTo"`
			Patch   struct {
				Operation string `json:"operation"`
				Value     any    `json:"value"`
			} `json:"patch"`
		} `json:"configPatches"`
	} `json:"spec"`
}

func TestIstioEnvoyFilter(t *testing.T) {
	var ef envoyFilter
	if err := yaml.Unmarshal(read(t, "istio-envoyfilter.yaml"), &ef); err != nil {
		t.Fatal(err)
	}
	if ef.Kind != "EnvoyFilter" || len(ef.Spec.ConfigPatches) == 0 {
		t.Fatalf("not an EnvoyFilter with patches: %+v", ef)
	}
	var rl ratelimitv3.RateLimit
	var limits []*routev3.RateLimit
	for i, p := range ef.Spec.ConfigPatches {
		value, err := yaml.Marshal(p.Patch.Value)
		if err != nil {
			t.Fatal(err)
		}
		switch p.ApplyTo {
		case "HTTP_FILTER":
			var f hcmv3.HttpFilter
			decode(t, value, &f)
			if err := validate(&f); err != nil {
				t.Fatalf("patch %d: %v", i, err)
			}
			if f.GetName() == "envoy.filters.http.ratelimit" {
				if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
					t.Fatal(err)
				}
			}
		case "VIRTUAL_HOST":
			// A MERGE patch is a partial VirtualHost (no name, no
			// domains): its parts are validated, not the whole.
			var vh routev3.VirtualHost
			decode(t, value, &vh)
			for _, r := range vh.GetRateLimits() {
				if err := validate(r); err != nil {
					t.Fatalf("patch %d: %v", i, err)
				}
			}
			limits = append(limits, vh.GetRateLimits()...)
		default:
			t.Fatalf("patch %d: applyTo %s not checked by this test", i, p.ApplyTo)
		}
	}
	checkFilter(t, &rl)
	checkDescriptors(t, limits, []string{rl.GetDomain()})
}

// TestValidateCatchesErrors: the checks above fail on a broken bootstrap,
// an unknown field and an invalid message inside an Any alike.
func TestValidateCatchesErrors(t *testing.T) {
	good := read(t, "envoy.yaml")
	for name, bad := range map[string][]byte{
		"unknown field":  bytes.Replace(good, []byte("stat_prefix: ingress"), []byte("stat_prefix: ingress\n                stat_prefx: typo"), 1),
		"invalid in any": bytes.Replace(good, []byte("stat_prefix: ingress"), []byte(`stat_prefix: ""`), 1),
	} {
		t.Run(name, func(t *testing.T) {
			j, err := yaml.YAMLToJSON(bad)
			if err != nil {
				t.Fatal(err)
			}
			var bs bootstrapv3.Bootstrap
			if err := protojson.Unmarshal(j, &bs); err == nil {
				if err := validate(&bs); err == nil {
					t.Fatal("accepted")
				}
			}
		})
	}
}
