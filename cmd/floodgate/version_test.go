package main

import (
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/internal/metrics"
	"github.com/floodgate-dev/floodgate/internal/version"
)

func TestBuildInfoMetric(t *testing.T) {
	mfs, err := metrics.NewRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_build_info" {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetGauge().GetValue() != 1 {
			t.Fatalf("floodgate_build_info = %v, want 1", m.GetGauge().GetValue())
		}
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for _, k := range []string{"version", "commit", "date", "goversion"} {
			if labels[k] == "" {
				t.Errorf("label %s empty in %v", k, labels)
			}
		}
		return
	}
	t.Fatal("no floodgate_build_info metric")
}

func TestVersionString(t *testing.T) {
	if s := version.Read().String(); !strings.HasPrefix(s, "floodgate ") || !strings.Contains(s, "go1.") {
		t.Fatalf("version %q", s)
	}
}
