package topics_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"floodgate/stacktest"
	"floodgate/topics"
)

func TestEnsureIdempotent(t *testing.T) {
	brokers := stacktest.Brokers(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("floodgate.test.topics.%d", time.Now().UnixNano())
	specs := []topics.Spec{
		{Name: prefix + ".a", Partitions: 4},
		{Name: prefix + ".b", Partitions: 1, Configs: map[string]string{"retention.ms": "3600000"}},
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := topics.Delete(ctx, brokers, prefix+".a", prefix+".b"); err != nil {
			t.Errorf("delete test topics: %v", err)
		}
	})

	res, err := topics.Ensure(ctx, brokers, specs...)
	if err != nil {
		t.Fatalf("first Ensure: %v", err)
	}
	for i, r := range res {
		if !r.Created || r.Partitions != specs[i].Partitions {
			t.Errorf("first Ensure %s = %+v, want created with %d partitions", specs[i].Name, r, specs[i].Partitions)
		}
	}

	// Again, with a different partition count: exists, left as it is.
	specs[0].Partitions = 8
	res, err = topics.Ensure(ctx, brokers, specs...)
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	if r := res[0]; r.Created || r.Partitions != 4 || r.Wanted != 8 || !strings.Contains(r.String(), "exists, 4 partitions (spec: 8)") {
		t.Errorf("second Ensure = %+v (%s)", r, r)
	}

	parts, err := topics.Partitions(ctx, brokers, prefix+".a", prefix+".b")
	if err != nil || parts[prefix+".a"] != 4 || parts[prefix+".b"] != 1 {
		t.Errorf("Partitions = %v, %v", parts, err)
	}
}

func TestEnsureRejectsBadSpec(t *testing.T) {
	tests := []topics.Spec{
		{Name: "", Partitions: 1},
		{Name: "a b", Partitions: 1},
		{Name: "ok", Partitions: 0},
		{Name: "..", Partitions: 1},
		{Name: "ok", Partitions: 1, ReplicationFactor: -2},
	}
	for _, s := range tests {
		t.Run(s.Name, func(t *testing.T) {
			// No broker is contacted: validation comes first.
			if _, err := topics.Ensure(t.Context(), []string{"127.0.0.1:1"}, s); err == nil {
				t.Errorf("Ensure(%+v) accepted an invalid spec", s)
			}
		})
	}
}
