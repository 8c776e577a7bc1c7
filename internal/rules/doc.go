// Package rules reads floodgate's rules file: which actions are limited, for
// which feature kinds, by which sliding-window limits, with shadow mode,
// strict mode, an allowlist and a deny message per rule. docs/rules.md
// describes the format.
//
// A rules file is validated whole at load; errors carry the line and reason.
// Package rules/reload keeps a file's rules in force across edits.
//
//	set, err := rules.Load("examples/rules.yaml")
//	if err != nil { ... }
//	for _, r := range set.Match("login_failed", "ip") {
//		if r.Allowed(ip) { continue }
//		for _, l := range r.Limits { ... } // l.Count events per l.Window
//	}
package rules
