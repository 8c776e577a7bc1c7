package live

import (
	"encoding/json"
	"strings"
	"testing"
)

// What a new owner takes from its predecessor's carried decisions: entries
// of decide.lua's shape, at most as many as an owner carries; anything else
// is dropped alone, so that it cannot misalign the script's reading of the
// entries after it.
func TestParseInheritedKeepsWellFormedEntriesOnly(t *testing.T) {
	cand := []string{"deny", "1", "r", "1m", "11", "60000", "10", `{"rule":"r","since":`, `{"f":"a:k:x"}`}
	good := append([]string{"sha", "a:k:x", `"a:k:x"`, `{"t":10}`, "70", "1"}, cand...)
	none := []string{"sha", "a:k:y", `"a:k:y"`, `{"t":10}`, "70", "0"}
	short := append([]string{"sha", "a:k:z", `"a:k:z"`, `{"t":10}`, "70", "2"}, cand...) // says 2, has 1
	js, err := json.Marshal([][]string{good, short, none, {"x"}, {"sha", "f", "fj", "s", "70", "-1"}})
	if err != nil {
		t.Fatal(err)
	}
	subs, bad := parseInherited(js)
	if len(subs) != 2 || subs[0][1] != "a:k:x" || subs[1][1] != "a:k:y" || bad != 3 {
		t.Fatalf("kept %v, dropped %d; want x and y kept, 3 dropped", subs, bad)
	}
	if subs, bad := parseInherited([]byte("not json")); len(subs) != 0 || bad != 1 {
		t.Fatalf("from garbage: %v, %d dropped", subs, bad)
	}
	many := strings.Repeat(string(mustJSON(t, none))+",", maxDeferred+5)
	subs, bad = parseInherited([]byte("[" + strings.TrimSuffix(many, ",") + "]"))
	if len(subs) != maxDeferred || bad != 5 {
		t.Fatalf("from %d entries: kept %d, dropped %d; want %d kept", maxDeferred+5, len(subs), bad, maxDeferred)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
