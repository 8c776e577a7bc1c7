package promtext

import (
	"strings"
	"testing"
)

func TestParseSum(t *testing.T) {
	in := `# HELP x
floodgate_aggregator_messages_in_total{group="a"} 10
floodgate_aggregator_messages_in_total{group="b"} 5
floodgate_rules_reloads_total{result="error"} 2
floodgate_rules_loaded 3
`
	s, err := Parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"floodgate_aggregator_messages_in_total", nil, 15},
		{"floodgate_aggregator_messages_in_total", []string{`group="a"`}, 10},
		{"floodgate_rules_reloads_total", []string{`result="error"`}, 2},
		{"floodgate_rules_loaded", nil, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.Sum(tc.name, tc.labels...); got != tc.want {
				t.Fatalf("Sum(%s, %v) = %v, want %v", tc.name, tc.labels, got, tc.want)
			}
		})
	}
}
