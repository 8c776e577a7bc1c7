package window_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// Operator records on the decisions topic: their own fields, read back by
// the same type as the aggregator's deny decisions, whose format is
// unchanged.
func TestOperatorDecisionJSON(t *testing.T) {
	d := window.DecisionMessage{ID: "p1-1-0-0", Type: window.DecisionReset, Action: "a", Kind: "ip", Subject: "192.0.2.1",
		Operator: "alice", Cleared: []string{"deny"}, DeletedKeys: 3, Offset: 17, TS: base}
	js, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"p1-1-0-0","type":"reset","action":"a","kind":"ip","subject":"192.0.2.1","operator":"alice","cleared":["deny"],"deleted_keys":3,"offset":17,"ts":` + jsInt(base.UnixMilli()) + `}`
	if string(js) != want {
		t.Fatalf("reset record\n got %s\nwant %s", js, want)
	}
	var back window.DecisionMessage
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.Type != d.Type || back.Offset != 17 || back.Operator != "alice" || !back.IsOperator() || back.Limit.Window != 0 {
		t.Fatalf("read back %+v", back)
	}
	deny := window.DecisionMessage{Action: "a", Kind: "ip", Subject: "s", Rule: "r", Limit: rules.Limit{Count: 5, Window: time.Minute}, Count: 6, Until: base, TS: base}
	js, _ = json.Marshal(deny)
	if strings.Contains(string(js), "type") || strings.Contains(string(js), "operator") {
		t.Fatalf("deny decision carries operator fields: %s", js)
	}
}

func jsInt(n int64) string { b, _ := json.Marshal(n); return string(b) }
