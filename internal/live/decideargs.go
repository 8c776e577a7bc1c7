package live

import (
	"encoding/json"
	"strconv"

	"github.com/floodgate-dev/floodgate/internal/rules"
)

// decideArgs appends one subject's part of decide.lua's arguments: its
// field and the field as JSON, its state and the state's expiry, and its
// deny and shadow candidates. A candidate carries its deny record's JSON up
// to "since" (which only the old record in Redis tells) and its decision
// message whole: built here, where they cost a fraction of what building
// them in Lua cost Redis (docs/profiles.md), in the layout window/lib.lua's
// fg_deny_json writes.
func decideArgs(args []any, field, state string, expires int64, best [2]*candidate, limits []profileLimit) []any {
	fj := jsonString(field)
	n := 0
	for _, c := range best {
		if c != nil {
			n++
		}
	}
	args = append(args, field, fj, state, expires, n)
	for k, c := range best {
		if c == nil {
			continue
		}
		lim := limits[c.l-1]
		kind, shadow := "deny", "false"
		if k == 1 {
			kind, shadow = "shadow", "true"
		}
		wf := ""
		if lim.limit.Window > 0 {
			wf = rules.FormatWindow(lim.limit.Window)
		}
		common := `"rule":` + jsonString(lim.rule.Name) + `,"limit":` + strconv.FormatInt(lim.limit.Count, 10) +
			`,"window":"` + wf + `","count":` + strconv.FormatInt(c.count, 10) + `,"until":` + strconv.FormatInt(c.untilMS, 10)
		msg := jsonString(lim.rule.Message)
		head := `{` + common + `,"message":` + msg + `,"since":`
		decision := `{"f":` + fj + `,` + common + `,"shadow":` + shadow + `,"message":` + msg +
			`,"ts":` + strconv.FormatInt(c.t*1000, 10) + `}`
		args = append(args, kind, c.l, lim.rule.Name, wf, c.count, c.untilMS, c.t, head, decision)
	}
	return args
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil { // a string always marshals; invalid UTF-8 becomes U+FFFD
		return `""`
	}
	return string(b)
}
