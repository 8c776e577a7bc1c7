package window

import _ "embed"

// banLib reads a subject's ban in a script: prepended (after LuaLib) to the
// scripts that decide (evalBody), so that exact checks and strict takes deny
// a banned subject whatever its counts.
//
//	fg_ban(slot, f, now_ms) -> the ban's JSON while it is in force, else nil
//
//go:embed ban_lib.lua
var banLib string

// recordsBody reads what is recorded of one subject besides its counts.
//
//	KEYS: the slot's state key (routing only)
//	ARGV: slot, field
//
// Returns {deny JSON, shadow JSON, ban JSON, state JSON}, each false when
// absent.
//
//go:embed records.lua
var recordsBody string
