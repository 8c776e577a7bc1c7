package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	"sigs.k8s.io/yaml"
)

// k8sDoc is what this test reads of a Kubernetes manifest (deploy's own
// test decodes them strictly into the API types).
type k8sDoc struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Data       map[string]string `json:"data"`
	StringData map[string]string `json:"stringData"`
	Spec       struct {
		Template struct {
			Spec podSpec `json:"spec"`
		} `json:"template"`
		JobTemplate struct {
			Spec struct {
				Template struct {
					Spec podSpec `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		} `json:"jobTemplate"`
	} `json:"spec"`
}

type podSpec struct {
	Containers []struct {
		Name    string   `json:"name"`
		Command []string `json:"command"`
		Args    []string `json:"args"`
		EnvFrom []struct {
			ConfigMapRef *struct {
				Name string `json:"name"`
			} `json:"configMapRef"`
			SecretRef *struct {
				Name string `json:"name"`
			} `json:"secretRef"`
		} `json:"envFrom"`
		Env []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"env"`
	} `json:"containers"`
}

// TestKubernetesCommandLines parses every floodgate container's args of
// deploy/kubernetes/base with the binary's own parser (kong, as main builds it)
// in the environment the container gets from its ConfigMaps and Secrets:
// a renamed flag, a bad enum or duration, in args or in the environment,
// fails here instead of in a rollout. Every FLOODGATE_* variable given must
// be read by some container's command.
func TestKubernetesCommandLines(t *testing.T) {
	files, err := filepath.Glob("../../deploy/kubernetes/base/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var docs []k8sDoc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range strings.Split("\n"+string(b), "\n---\n") {
			var doc k8sDoc
			if err := yaml.Unmarshal([]byte(d), &doc); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if doc.Kind != "" {
				docs = append(docs, doc)
			}
		}
	}
	envOf := map[string]map[string]string{} // "ConfigMap/name" -> data
	for _, d := range docs {
		switch d.Kind {
		case "ConfigMap":
			envOf["ConfigMap/"+d.Metadata.Name] = d.Data
		case "Secret":
			envOf["Secret/"+d.Metadata.Name] = d.StringData
		}
	}
	given := map[string]bool{} // FLOODGATE_* variables given to containers
	read := map[string]bool{}  // ... and read by their commands
	containers := 0
	for _, d := range docs {
		spec := d.Spec.Template.Spec
		if d.Kind == "CronJob" {
			spec = d.Spec.JobTemplate.Spec.Template.Spec
		}
		for _, c := range spec.Containers {
			containers++
			t.Run(d.Metadata.Name+"/"+c.Name, func(t *testing.T) {
				if len(c.Command) > 0 {
					t.Fatalf("command %v: the image's entrypoint is floodgate; set args only", c.Command)
				}
				env := map[string]string{}
				for _, ef := range c.EnvFrom {
					key := ""
					if ef.ConfigMapRef != nil {
						key = "ConfigMap/" + ef.ConfigMapRef.Name
					}
					if ef.SecretRef != nil {
						key = "Secret/" + ef.SecretRef.Name
					}
					data, ok := envOf[key]
					if !ok {
						t.Fatalf("envFrom %s not defined", key)
					}
					for k, v := range data {
						env[k] = v
					}
				}
				for _, e := range c.Env {
					env[e.Name] = e.Value
				}
				for k, v := range env {
					if strings.HasPrefix(k, "FLOODGATE_") {
						given[k] = true
						t.Setenv(k, v)
					}
				}
				var cli CLI
				parser, err := newParser(&cli, kong.Exit(func(int) { t.Fatalf("parser exited on %v", c.Args) }))
				if err != nil {
					t.Fatal(err)
				}
				kctx, err := parser.Parse(c.Args)
				if err != nil {
					t.Fatalf("floodgate %s: %v", strings.Join(c.Args, " "), err)
				}
				for _, f := range kctx.Flags() {
					for _, e := range f.Envs {
						if _, ok := env[e]; ok {
							read[e] = true
						}
					}
				}
			})
		}
	}
	if containers == 0 {
		t.Fatal("no containers found")
	}
	for k := range given {
		if !read[k] {
			t.Errorf("%s is given to containers whose commands read no such variable (a typo?)", k)
		}
	}
	if !read["FLOODGATE_POSTGRES_URL"] {
		t.Error("no command reads FLOODGATE_POSTGRES_URL from the Secret")
	}
}
